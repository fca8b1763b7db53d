-- Job definitions (what a job is) and one row per run (each time it fires).
CREATE TABLE scheduler.schedule_details (
  id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant          text        NOT NULL,
  spec            jsonb       NOT NULL,
  version         integer     NOT NULL DEFAULT 1,
  enabled         boolean     NOT NULL,
  deleted_at      timestamptz,
  idempotency_key text,
  request_hash    text,
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX schedule_details_idempotency ON scheduler.schedule_details (tenant, idempotency_key)
  WHERE idempotency_key IS NOT NULL;
CREATE INDEX schedule_details_tenant ON scheduler.schedule_details (tenant, id) WHERE deleted_at IS NULL;

CREATE TABLE scheduler.scheduled_execution (
  id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  schedule_id      bigint      NOT NULL REFERENCES scheduler.schedule_details (id),
  scheduled_at     timestamptz NOT NULL,
  status           text        NOT NULL CHECK (status IN
                     ('SCHEDULED','QUEUED','RUNNING','SUCCEEDED','RETRY_WAIT','DEAD','CANCELLED','SKIPPED')),
  manual           boolean     NOT NULL DEFAULT false,
  attempt          integer     NOT NULL DEFAULT 1,
  next_attempt_at  timestamptz,
  lease_token      bigint      NOT NULL DEFAULT 0,
  lease_expires_at timestamptz,
  worker_id        text,
  last_error       text,
  dispatched_at    timestamptz,
  finished_at      timestamptz,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  UNIQUE (schedule_id, scheduled_at)
);
-- Only rows waiting to fire are indexed, so polling stays fast however long the history grows.
CREATE INDEX scheduled_execution_due ON scheduler.scheduled_execution (scheduled_at) WHERE status = 'SCHEDULED';
CREATE INDEX scheduled_execution_ready ON scheduler.scheduled_execution (coalesce(next_attempt_at, scheduled_at))
  WHERE status IN ('QUEUED', 'RETRY_WAIT');
CREATE INDEX scheduled_execution_leases ON scheduler.scheduled_execution (lease_expires_at) WHERE status = 'RUNNING';
CREATE INDEX scheduled_execution_dead ON scheduler.scheduled_execution (id) WHERE status = 'DEAD';
CREATE INDEX scheduled_execution_schedule ON scheduler.scheduled_execution (schedule_id, id);
