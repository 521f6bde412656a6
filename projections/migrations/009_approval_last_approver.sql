-- An approval approved again (the same facts, back after a staleness) has several ProductionApproved
-- events in the audit log, and its row holds the last one's approver and reason, as a replay
-- projects them. 008 filled rows from any one of them (UPDATE … FROM picks a match arbitrarily),
-- so a live schema could digest unequal to its replay: every production row is set from its
-- approval's last event here (a no-op where 008 or the projector already did).
UPDATE approvals AS a
   SET approved_by = COALESCE(l.payload->>'approved_by', ''),
       approval_reason = COALESCE(l.payload->>'reason', '')
  FROM (SELECT DISTINCT ON (payload->>'approval_id') payload->>'approval_id' AS approval_id, payload
          FROM audit_log
         WHERE event_type = 'ProductionApproved'
         ORDER BY payload->>'approval_id', stream, seq DESC) AS l
 WHERE a.kind = 'production'
   AND l.approval_id = a.approval_id
   AND (a.approved_by, a.approval_reason) IS DISTINCT FROM
       (COALESCE(l.payload->>'approved_by', ''), COALESCE(l.payload->>'reason', ''));
