-- Priority (0 HIGH, 1 NORMAL, 2 LOW) and tenant are copied onto a run when the
-- runner queues it, so workers can claim by priority and per tenant without
-- joining the definition. Jittered starts reuse next_attempt_at: a run is
-- ready when coalesce(next_attempt_at, scheduled_at) has passed.
ALTER TABLE scheduler.scheduled_execution
  ADD COLUMN priority smallint NOT NULL DEFAULT 1 CHECK (priority BETWEEN 0 AND 2),
  ADD COLUMN tenant   text;
UPDATE scheduler.scheduled_execution e SET tenant = d.tenant
  FROM scheduler.schedule_details d WHERE d.id = e.schedule_id;
DROP INDEX scheduler.scheduled_execution_ready;
CREATE INDEX scheduled_execution_ready ON scheduler.scheduled_execution
  (priority, coalesce(next_attempt_at, scheduled_at)) WHERE status IN ('QUEUED', 'RETRY_WAIT');
CREATE INDEX scheduled_execution_inflight ON scheduler.scheduled_execution (schedule_id)
  WHERE status IN ('QUEUED', 'RUNNING', 'RETRY_WAIT');
