-- The admin request history reads the newest requests first, all of them or one client's
-- (gateway/admin/reads.py REQUESTS_SQL: ORDER BY accepted_at DESC NULLS LAST LIMIT n): without these
-- it sorted the whole table for every read. NULLS LAST as in the query, so the index order is its order.
CREATE INDEX IF NOT EXISTS requests_accepted_at ON requests (accepted_at DESC NULLS LAST);
CREATE INDEX IF NOT EXISTS requests_client_accepted_at ON requests (client_id, accepted_at DESC NULLS LAST);
