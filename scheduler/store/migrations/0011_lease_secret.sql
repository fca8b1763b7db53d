-- Remote (gRPC) worker leases (issue 19): the SHA-256 of the 128-bit
-- random secret handed to the worker that leased the run, and the verified
-- SPIFFE ID of that worker (NULL without mTLS). Both are set or cleared by
-- every claim; in-process claims leave them NULL, so no remote call can
-- match an in-process lease. lease_token stays the fencing counter.
ALTER TABLE scheduler.scheduled_execution
	ADD COLUMN lease_secret_hash bytea,
	ADD COLUMN leased_by text;
