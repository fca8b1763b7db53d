-- Claims go through scheduled_execution_tenant_ready (0004); the global
-- ready index only cost a write per queued run.
DROP INDEX scheduler.scheduled_execution_ready;
