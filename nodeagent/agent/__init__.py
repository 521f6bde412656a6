"""The node agent process: registration, telemetry, control jobs and invoke serving over NATS."""
