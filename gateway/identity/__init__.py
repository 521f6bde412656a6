"""One NATS identity per node: its nkey, recorded as events, rendered into the server's users."""
