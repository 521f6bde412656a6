-- Who approved a production approval and why, as the event recorded them (since the admin API
-- required both). Rows projected before these columns existed are filled from the audit log's
-- copy of their event, so this schema digests equal to a replay into a fresh one.
ALTER TABLE approvals ADD COLUMN IF NOT EXISTS approved_by text;
ALTER TABLE approvals ADD COLUMN IF NOT EXISTS approval_reason text;
UPDATE approvals AS a
   SET approved_by = COALESCE(l.payload->>'approved_by', ''),
       approval_reason = COALESCE(l.payload->>'reason', '')
  FROM audit_log AS l
 WHERE a.kind = 'production'
   AND a.approved_by IS NULL
   AND l.event_type = 'ProductionApproved'
   AND l.payload->>'approval_id' = a.approval_id;
