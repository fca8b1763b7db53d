-- When the runner queued the run: fire lag = queued_at − scheduled_at
-- (dispatched_at, set by the first lease, gives the start lag).
ALTER TABLE scheduler.scheduled_execution ADD COLUMN queued_at timestamptz;
