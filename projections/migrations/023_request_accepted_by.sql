-- The gateway replica that accepted a request (RequestAccepted.gateway_id): should it vanish, a
-- surviving replica fails the requests it left open (gateway/serving/vanished.py), found here.
-- Null for requests accepted before it was recorded.
ALTER TABLE requests ADD COLUMN IF NOT EXISTS accepted_by text;
CREATE INDEX IF NOT EXISTS requests_open_by_gateway ON requests (accepted_by) WHERE status = 'accepted';
