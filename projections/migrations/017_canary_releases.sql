-- Canary releases (docs/releases.md): a stable deployment's split of its capability's traffic
-- (`routing_weights`, and whether a client keeps its deployment), an experiment's rollback policy,
-- and every change of a split with why it was made (a tripped guard: what it measured).
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS routing_sticky boolean NOT NULL DEFAULT false;
ALTER TABLE deployments ADD COLUMN IF NOT EXISTS rollback_policy jsonb;
CREATE TABLE IF NOT EXISTS routing_changes (
    seq bigint PRIMARY KEY,
    capability text NOT NULL,
    stable_deployment_id text NOT NULL,
    weights jsonb NOT NULL,
    sticky boolean NOT NULL DEFAULT false,
    reason text,
    guard jsonb,
    changed_at timestamptz
);
CREATE INDEX IF NOT EXISTS routing_changes_capability ON routing_changes (capability, seq DESC);
