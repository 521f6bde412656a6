-- The request's W3C trace id (32 hex digits; null before tracing recorded one): the id a client
-- got in `x-trace-id`, joining the row to the request's spans and its gateway's logs.
ALTER TABLE requests ADD COLUMN IF NOT EXISTS trace_id text;
CREATE INDEX IF NOT EXISTS requests_trace_id ON requests (trace_id) WHERE trace_id IS NOT NULL;
