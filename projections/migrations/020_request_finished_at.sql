-- The console's traffic read (gateway/admin/console_reads.py FINISHED_SQL) takes the requests that
-- finished in the last hour (or window), every few seconds while a console is open: without this
-- it read the whole requests table each time. Refusals have no accepted_at, so finished_at it is.
CREATE INDEX IF NOT EXISTS requests_finished_at ON requests (finished_at);
