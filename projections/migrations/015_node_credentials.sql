-- A node's NATS identity (`modelforge nodes credentials|revoke`): the public half of its nkey while
-- it has one, when it was issued, and when and why it was revoked (new credentials clear both).
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS nkey_public_key text;
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS credentials_issued_at timestamptz;
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS credentials_revoked_at timestamptz;
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS credentials_revoked_reason text;
-- Messages a gateway left out of its view because they spoke for another node than their sender
-- (ForgedEventRefused): one row per refused message, `recordings` counting the replicas that said so.
CREATE TABLE IF NOT EXISTS forged_events_refused (
    subject text NOT NULL,
    refused_sequence bigint NOT NULL,
    node_id text NOT NULL,
    claimed_node_id text NOT NULL,
    refused_type text NOT NULL,
    recorded_at timestamptz,  -- the latest recording
    recordings bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (subject, refused_sequence)
);
