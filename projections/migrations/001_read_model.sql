-- The read model. Every table lives in the schema the migrator targets (search_path), so a
-- replay builds into a fresh schema and `modelforge replay --swap` renames it into place.
-- Columns named `projected_at` are wall-clock bookkeeping and are left out of digests.

CREATE TABLE checkpoints (
    stream text PRIMARY KEY,
    last_seq bigint NOT NULL,
    projected_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE audit_log (
    stream text NOT NULL,
    seq bigint NOT NULL,
    subject text NOT NULL,
    event_id text,
    event_type text NOT NULL,
    schema_version int,
    aggregate_type text,
    aggregate_id text,
    occurred_at timestamptz,
    stored_at timestamptz NOT NULL,
    actor text,
    correlation_id text,
    causation_id text,
    headers json NOT NULL,  -- as received; json (not jsonb) keeps COPY cheap
    payload json,           -- json, not jsonb: validated, not re-parsed into binary, on the hot path
    decoded boolean NOT NULL,
    unknown_reason text,
    PRIMARY KEY (stream, seq)
);
-- No secondary index: every one costs the projector on each event; by-aggregate history is the
-- event store's (subjects carry the aggregate), the audit log is looked up by (stream, seq).

CREATE TABLE capability_contracts (
    capability text PRIMARY KEY,
    input_schema jsonb, output_schema jsonb, upgrade_class text, limits jsonb,
    registered_at timestamptz
);

CREATE TABLE artifact_sets (
    artifact_set_id text PRIMARY KEY,
    name text, capability text, node_id text, root text, files jsonb,
    file_count int, total_bytes bigint, risk_flags jsonb, manifest_sha256 text, source text,
    status text, verified_bytes bigint, failure_code text, failure_detail text, quarantine_reason text,
    registered_at timestamptz, updated_at timestamptz
);

CREATE TABLE nodes (
    node_id text PRIMARY KEY,
    hostname text, hardware_fingerprint text, protocol_capabilities jsonb, runtimes jsonb, agent_version text,
    enabled boolean NOT NULL DEFAULT true, disabled_reason text,
    production_eligible boolean NOT NULL DEFAULT false, eligibility_reason text,
    decommissioned boolean NOT NULL DEFAULT false, decommission_reason text,
    generation bigint, worker_started_at timestamptz,
    registered_at timestamptz, updated_at timestamptz
);

CREATE TABLE accelerators (
    accelerator_id text PRIMARY KEY,
    node_id text, kind text, name text, total_bytes bigint, compute_capability text, uuid text,
    pressure text NOT NULL DEFAULT 'NORMAL', pressure_utilization double precision, pressure_changed_at timestamptz,
    registered_at timestamptz
);

CREATE TABLE residencies (
    accelerator_id text NOT NULL,
    deployment_id text NOT NULL,
    node_id text, state text, load_id text, load_reason text,
    required_bytes bigint, measured_bytes bigint NOT NULL DEFAULT 0,
    baseline_bytes bigint, loaded_bytes bigint, peak_bytes bigint,
    runtime text, cold_load_ms double precision, engine_cache_hit boolean,
    load_count int NOT NULL DEFAULT 0, generation bigint,
    health_process boolean, health_runtime boolean, health_model boolean, health_detail text,
    failure_code text, failure_detail text, unload_reason text, reclaimed_bytes bigint,
    updated_at timestamptz,
    PRIMARY KEY (accelerator_id, deployment_id)
);

CREATE TABLE deployment_usage (
    accelerator_id text NOT NULL,
    deployment_id text NOT NULL,
    leases_granted bigint NOT NULL DEFAULT 0,
    last_used_at timestamptz,
    PRIMARY KEY (accelerator_id, deployment_id)
);

CREATE TABLE leases (
    lease_id text PRIMARY KEY,
    accelerator_id text, deployment_id text, request_id text, client_id text,
    reserved_bytes bigint, expires_at timestamptz, decision_fingerprint text,
    state text, outcome text, granted_at timestamptz, ended_at timestamptz
);
CREATE INDEX leases_active ON leases (accelerator_id) WHERE state = 'active';

CREATE TABLE placements (
    seq bigint PRIMARY KEY,
    accelerator_id text, request_id text, deployment_id text,
    verdict text NOT NULL, reason_codes jsonb, decision_fingerprint text,
    lease_id text, eviction_id text, required_bytes bigint, decided_at timestamptz
);

CREATE TABLE evictions (
    eviction_id text PRIMARY KEY,
    accelerator_id text, victims jsonb, for_deployment_id text, required_bytes bigint,
    decision_fingerprint text, state text, reclaimed_bytes bigint,
    planned_at timestamptz, completed_at timestamptz
);

CREATE TABLE co_residency (
    accelerator_id text NOT NULL,
    deployment_a text NOT NULL,
    deployment_b text NOT NULL,
    generation bigint, observed_bytes bigint, state text, proven_at timestamptz,
    PRIMARY KEY (accelerator_id, deployment_a, deployment_b)
);

CREATE TABLE candidates (
    candidate_id text PRIMARY KEY,
    capability text, artifact_set_id text, runtime_profile jsonb, deployment_config jsonb,
    status text, latest_probe_id text, registered_at timestamptz, updated_at timestamptz
);

CREATE TABLE probes (
    probe_id text PRIMARY KEY,
    candidate_id text, node_id text, accelerator_id text, lab_approval_id text, status text,
    hardware_fingerprint text, runtime text,
    health_process boolean, health_runtime boolean, health_model boolean, health_detail text,
    output_valid boolean, baseline_bytes bigint, loaded_bytes bigint, peak_bytes bigint,
    cold_load_ms double precision, inference_ms double precision, unload_reclaimed_bytes bigint,
    failure_code text, failure_detail text, requested_at timestamptz, finished_at timestamptz
);

CREATE TABLE approvals (
    approval_id text PRIMARY KEY,
    kind text, candidate_id text, node_ids jsonb, expires_at timestamptz,
    evidence_fingerprint text, evidence jsonb,
    status text, revoke_reason text,
    stale boolean NOT NULL DEFAULT false, stale_facts jsonb, stale_at timestamptz,
    approved_at timestamptz, updated_at timestamptz
);

CREATE TABLE deployments (
    deployment_id text PRIMARY KEY,
    capability text, candidate_id text, approval_id text, artifact_set_id text, model_name text,
    channel text, route text, status text, active boolean,
    required_bytes bigint, peak_bytes bigint, per_request_bytes bigint, cold_load_ms double precision,
    residency_kind text, keep_warm_ttl_s double precision, embedding_space jsonb, max_batch_size int,
    routing_weights jsonb, status_reason text,
    created_at timestamptz, updated_at timestamptz
);

-- Service clients: never a key, never a key hash.
CREATE TABLE clients (
    client_id text PRIMARY KEY,
    name text, scopes jsonb, requests_per_minute int, max_concurrency int, priority int, project_id text,
    enabled boolean NOT NULL DEFAULT true, disabled_reason text,
    created_at timestamptz, updated_at timestamptz
);

CREATE TABLE credentials (
    credential_id text PRIMARY KEY,
    client_id text, key_prefix text, state text, expires_at timestamptz, grace_until timestamptz,
    replaced_by text, revoke_reason text, issued_at timestamptz, updated_at timestamptz
);

CREATE TABLE projects (
    project_id text PRIMARY KEY, name text, owner text, registered_at timestamptz
);

CREATE TABLE project_channels (
    project_id text NOT NULL, capability text NOT NULL, channel text, bound_at timestamptz,
    PRIMARY KEY (project_id, capability)
);

CREATE TABLE project_clients (
    project_id text NOT NULL, client_id text NOT NULL, bound_at timestamptz,
    PRIMARY KEY (project_id, client_id)
);

CREATE TABLE project_fit_evidence (
    project_id text NOT NULL, capability text NOT NULL,
    evidence jsonb, passed boolean, failed_gates jsonb, recorded_at timestamptz,
    PRIMARY KEY (project_id, capability)
);

-- The policy in force: a patch per revision over the defaults seeded here, which equal
-- gateway.scheduler.policy.DEFAULT_POLICY (a unit test keeps them equal).
CREATE TABLE scheduler_policy (
    id int PRIMARY KEY,
    revision bigint NOT NULL DEFAULT 0,
    safety_reserve_min_bytes bigint,  -- nullable only so a patch can be written as an upsert
    safety_reserve_fraction double precision,
    telemetry_fresh_seconds double precision,
    settings jsonb, revised_at timestamptz
);
INSERT INTO scheduler_policy (id, revision, safety_reserve_min_bytes, safety_reserve_fraction, telemetry_fresh_seconds)
VALUES (1, 0, 1073741824, 0.05, 10.0);

CREATE TABLE policy_revisions (
    seq bigint PRIMARY KEY, revision bigint, settings jsonb, revised_at timestamptz
);

CREATE TABLE requests (
    request_id text PRIMARY KEY,
    client_id text, capability text, status text,
    input_sha256 text, shape_bucket text, items int,
    deployment_id text, node_id text, accelerator_id text, cold boolean,
    code text, http_status int, usage_items int, usage_input_tokens int,
    validation_ms double precision, resolution_ms double precision, scheduling_ms double precision,
    load_ms double precision, queue_ms double precision, payload_ms double precision,
    dispatch_ms double precision, worker_preprocess_ms double precision,
    worker_inference_ms double precision, worker_serialize_ms double precision,
    transport_ms double precision, gateway_ms double precision, total_ms double precision,
    accepted_at timestamptz, finished_at timestamptz
);
CREATE INDEX requests_client_capability ON requests (client_id, capability);

-- Last observation per accelerator from MF_TELEMETRY (not an event: kept out of digests/replays).
CREATE TABLE telemetry (
    node_id text NOT NULL, accelerator_id text NOT NULL,
    total_bytes bigint, used_bytes bigint, observed_at timestamptz,
    PRIMARY KEY (node_id, accelerator_id)
);
