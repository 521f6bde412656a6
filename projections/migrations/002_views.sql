-- Read-time views. The scheduler view uses the formulas of gateway.scheduler.accounting:
--   attributed  = resident + materialised
--   external    = max(0, observed - attributed)
--   leased      = reserved - materialised (outstanding)
--   committed   = max(observed, attributed) + leased
--   schedulable = total - safety reserve - committed
-- Residents are residencies that hold (or are about to hold) memory: loaded/unloading count their
-- measured bytes, requested/loading their required bytes (nothing measured yet). Leases carry no
-- materialisation events yet, so materialised is 0.

CREATE VIEW scheduler_view AS
WITH res AS (
    SELECT accelerator_id,
           sum(CASE WHEN state IN ('loaded', 'unloading') THEN measured_bytes
                    WHEN state IN ('requested', 'loading') THEN coalesce(required_bytes, 0)
                    ELSE 0 END)::bigint AS resident_bytes,
           count(*) FILTER (WHERE state IN ('requested', 'loading', 'loaded', 'unloading')) AS residents
    FROM residencies GROUP BY accelerator_id
), lea AS (
    SELECT accelerator_id, sum(reserved_bytes)::bigint AS reserved_bytes, count(*) AS active_leases
    FROM leases WHERE state = 'active' GROUP BY accelerator_id
), base AS (
    SELECT a.accelerator_id, a.node_id, a.total_bytes,
           t.used_bytes AS observed_used_bytes, t.observed_at,
           extract(epoch FROM now() - t.observed_at)::double precision AS telemetry_age_s,
           coalesce(r.resident_bytes, 0) AS resident_bytes,
           0::bigint AS materialised_bytes,
           coalesce(l.reserved_bytes, 0) AS leased_bytes,
           coalesce(l.active_leases, 0) AS active_leases,
           coalesce(r.residents, 0) AS residents,
           greatest(p.safety_reserve_min_bytes, floor(a.total_bytes * p.safety_reserve_fraction))::bigint
               AS safety_reserve_bytes,
           p.telemetry_fresh_seconds,
           a.pressure, a.pressure_utilization
    FROM accelerators a
    JOIN scheduler_policy p ON p.id = 1
    LEFT JOIN res r ON r.accelerator_id = a.accelerator_id
    LEFT JOIN lea l ON l.accelerator_id = a.accelerator_id
    LEFT JOIN telemetry t ON t.accelerator_id = a.accelerator_id AND t.node_id = a.node_id
), books AS (
    SELECT base.*, resident_bytes + materialised_bytes AS attributed_bytes FROM base
), committed AS (
    SELECT books.*,
           greatest(0, coalesce(observed_used_bytes, 0) - attributed_bytes) AS external_bytes,
           greatest(coalesce(observed_used_bytes, 0), attributed_bytes) + leased_bytes AS committed_bytes
    FROM books
)
SELECT accelerator_id, node_id, total_bytes, observed_used_bytes, observed_at, telemetry_age_s,
       CASE WHEN observed_used_bytes IS NOT NULL AND observed_at IS NOT NULL
                 AND telemetry_age_s BETWEEN 0 AND telemetry_fresh_seconds
            THEN 'KNOWN' ELSE 'UNKNOWN' END AS attribution,
       resident_bytes, materialised_bytes, leased_bytes, attributed_bytes, external_bytes,
       safety_reserve_bytes, committed_bytes,
       total_bytes - safety_reserve_bytes - committed_bytes AS schedulable_bytes,
       CASE WHEN total_bytes > 0 THEN committed_bytes::double precision / total_bytes ELSE 1.0 END AS utilisation,
       pressure, pressure_utilization, residents, active_leases
FROM committed;

CREATE VIEW active_leases AS SELECT * FROM leases WHERE state = 'active';

CREATE VIEW unknown_events AS
SELECT stream, seq, subject, event_type, schema_version, unknown_reason, occurred_at
FROM audit_log WHERE NOT decoded;

-- p50/p95 of total latency per client and capability, over completed requests.
CREATE VIEW request_latency AS
SELECT client_id, capability,
       count(*) AS requests,
       count(*) FILTER (WHERE status = 'completed') AS completed,
       count(*) FILTER (WHERE status IN ('failed', 'rejected')) AS errors,
       count(*) FILTER (WHERE cold) AS cold_starts,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY total_ms) FILTER (WHERE status = 'completed') AS p50_ms,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY total_ms) FILTER (WHERE status = 'completed') AS p95_ms
FROM requests GROUP BY client_id, capability;
