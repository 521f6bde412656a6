-- What a completed probe's model files weigh (ProbeCompleted.weights_bytes): with its baseline and
-- loaded figures, what the deployment's envelope was taken from. Rows projected before the column
-- existed are filled from the audit log's copy of their event (0 where the event predates the
-- field), so this schema digests equal to a replay into a fresh one.
ALTER TABLE probes ADD COLUMN IF NOT EXISTS weights_bytes bigint;
UPDATE probes AS p
   SET weights_bytes = COALESCE((l.payload->>'weights_bytes')::bigint, 0)
  FROM audit_log AS l
 WHERE p.status = 'completed'
   AND p.weights_bytes IS NULL
   AND l.event_type = 'ProbeCompleted'
   AND l.payload->>'probe_id' = p.probe_id;
