-- When a run was first deferred by an open circuit since its last real
-- attempt: Defer dead-letters it (reason CIRCUIT_OPEN) once
-- execution.maxDeferSeconds have passed since then; a real attempt
-- (RetryLater, a reaped lease) clears it.
ALTER TABLE scheduler.scheduled_execution ADD COLUMN deferred_since timestamptz;
