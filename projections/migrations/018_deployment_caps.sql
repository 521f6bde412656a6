-- A deployment's caps (DeploymentCapsChanged; an experiment starts at one request at a time):
-- requests of it running at once across the gateway replicas (0: no cap of its own) and how many
-- more may wait for one.
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS max_concurrency integer NOT NULL DEFAULT 0;
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS max_queue_depth integer NOT NULL DEFAULT 64;
UPDATE deployments SET max_concurrency = 1 WHERE channel = 'experiment' AND max_concurrency = 0;
