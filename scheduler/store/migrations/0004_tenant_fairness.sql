-- Per-tenant claiming: ready runs by tenant (round-robin across tenants,
-- HIGH first within each) and running runs by tenant (concurrency cap).
CREATE INDEX scheduled_execution_tenant_ready ON scheduler.scheduled_execution
  (tenant, priority, coalesce(next_attempt_at, scheduled_at)) WHERE status IN ('QUEUED', 'RETRY_WAIT');
CREATE INDEX scheduled_execution_tenant_running ON scheduler.scheduled_execution (tenant) WHERE status = 'RUNNING';
