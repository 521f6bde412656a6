-- A deployment's replicas (copies kept resident, copies at most) and where new copies go
-- (DeploymentPromoted, DeploymentScalingChanged).
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS replicas_min integer NOT NULL DEFAULT 1;
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS replicas_max integer NOT NULL DEFAULT 1;
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS placement text NOT NULL DEFAULT 'binpack';
