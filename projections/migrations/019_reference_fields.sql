-- The reference's fields that went missing (issue 23).
-- A client's integration environment and purpose, as its owner stated them at creation.
ALTER TABLE clients ADD COLUMN IF NOT EXISTS integration_environment text NOT NULL DEFAULT '';
ALTER TABLE clients ADD COLUMN IF NOT EXISTS purpose text NOT NULL DEFAULT '';

-- When a client, and each of its credentials, last authenticated a request: from `ClientKeyUsed`
-- on MF_REQUESTS (at most one a minute per client and replica, not one per request). Own tables:
-- MF_REQUESTS events touch no row an MF_EVENTS handler writes, so the two streams project apart.
CREATE TABLE IF NOT EXISTS client_usage (
    client_id text PRIMARY KEY, last_used_at timestamptz
);
CREATE TABLE IF NOT EXISTS credential_usage (
    credential_id text PRIMARY KEY, client_id text, last_used_at timestamptz
);

-- The scheduler policy's `lab_paused` (lab-channel work refused LAB_PAUSED while true).
ALTER TABLE scheduler_policy ADD COLUMN IF NOT EXISTS lab_paused boolean NOT NULL DEFAULT false;

-- An embedding request's `input_type` (query | document; '' for other capabilities and before it
-- was recorded).
ALTER TABLE requests ADD COLUMN IF NOT EXISTS input_type text NOT NULL DEFAULT '';
