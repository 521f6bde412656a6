-- Stretches of a stream the projection never saw: MF_REQUESTS messages that aged out of the
-- stream (its max age) before the projector read them. Each row is written in the transaction that
-- moves the checkpoint past its stretch (projections/gaps.py); not part of digests.
CREATE TABLE IF NOT EXISTS projection_gaps (
    stream text NOT NULL,
    first_seq bigint NOT NULL,
    last_seq bigint NOT NULL,
    reason text NOT NULL,
    detected_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stream, first_seq)
);
