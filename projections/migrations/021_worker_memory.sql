-- Each resident deployment's worker process's own memory, from its node's last telemetry sample
-- (MF_TELEMETRY, a last-value feed like `telemetry`, not replayed and not in digests): its RSS on
-- the CPU device, its NVML per-process figure on a GPU. Each sample replaces its accelerator's
-- rows, so the row of a deployment unloaded since (its worker gone) is gone too.
CREATE TABLE IF NOT EXISTS worker_memory (
    accelerator_id text NOT NULL,
    deployment_id text NOT NULL,
    node_id text NOT NULL,
    worker_bytes bigint NOT NULL,
    observed_at timestamptz NOT NULL,
    PRIMARY KEY (accelerator_id, deployment_id)
);
