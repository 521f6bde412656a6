-- A PlacementRejected row stands for `decisions` identical refusals (or queueings) counted in one
-- window from `first_at`; dry runs are marked; `schedulable_bytes` is the accelerator's headroom
-- before the decision. Admissions (one row each) keep decisions = 1.
ALTER TABLE placements ADD COLUMN IF NOT EXISTS decisions bigint NOT NULL DEFAULT 1;
ALTER TABLE placements ADD COLUMN IF NOT EXISTS window_s double precision;
ALTER TABLE placements ADD COLUMN IF NOT EXISTS first_at timestamptz;
ALTER TABLE placements ADD COLUMN IF NOT EXISTS dry_run boolean NOT NULL DEFAULT false;
ALTER TABLE placements ADD COLUMN IF NOT EXISTS schedulable_bytes bigint;
-- Registered contracts: the digest a changed definition under the same version is refused by.
ALTER TABLE capability_contracts ADD COLUMN IF NOT EXISTS definition_sha256 text;
