-- Cheaper run rows (issue 27). A heartbeat changes only lease_expires_at
-- and updated_at; with no index on either it is a HOT update (no index
-- entry at all) where the page has room, which the fillfactor leaves for
-- it and for the run's later versions. The reaper finds expired leases
-- among the RUNNING runs through scheduled_execution_tenant_running
-- instead (they are bounded by the workers' concurrency).
DROP INDEX scheduler.scheduled_execution_leases;
ALTER TABLE scheduler.scheduled_execution SET (fillfactor = 70);
