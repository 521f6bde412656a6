-- A node a gateway declared lost (NodeLost): when, and why; its next WorkerStarted clears both.
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS lost_at timestamptz;
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS lost_reason text;
