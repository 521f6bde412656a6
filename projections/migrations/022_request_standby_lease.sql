-- The standby lease a completed request ran under (docs/scheduler.md, "Standby leases"): its
-- gateway's, taken while MF_EVENTS had no leader, so no lease of its own is on the leases table.
-- Null for a request that had its own lease, and for every request completed before it was recorded.
ALTER TABLE requests ADD COLUMN IF NOT EXISTS standby_lease_id text;
