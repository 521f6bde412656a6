-- Residency health checks and drains, and control jobs that failed without their own outcome.
ALTER TABLE residencies ADD COLUMN drained boolean NOT NULL DEFAULT false;
ALTER TABLE residencies ADD COLUMN health_checked_at timestamptz;

CREATE TABLE agent_job_failures (
    job_id text PRIMARY KEY,
    op text, accelerator_id text, deployment_id text, code text, detail text, deliveries int,
    failed_at timestamptz
);
