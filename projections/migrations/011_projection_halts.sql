-- The event a stream's projector halted at (one row per stream while it stays halted), so the
-- gateway can say so: written in its own transaction as the projector stops, deleted by the commit
-- that applies that event (projections/halts.py); not part of digests.
CREATE TABLE IF NOT EXISTS projection_halts (
    stream text PRIMARY KEY,
    seq bigint NOT NULL,
    event_type text NOT NULL,
    reason text NOT NULL,
    halted_at timestamptz NOT NULL DEFAULT now()
);
