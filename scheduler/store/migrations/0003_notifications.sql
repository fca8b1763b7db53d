-- Notification outbox: rows are inserted in the same statement that moves a
-- run to RETRY_WAIT or DEAD, so a crash between the transition and the
-- webhook call loses nothing. The notifier claims due PENDING rows with a
-- visibility lease (next_attempt_at pushed forward, attempt + 1) and marks
-- them SENT, or PENDING again with backoff, or FAILED after its attempts.
CREATE TABLE scheduler.notification_outbox (
  id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event           text        NOT NULL CHECK (event IN ('FAILURE', 'DEAD_LETTER')),
  url             text        NOT NULL,
  run_id          bigint      NOT NULL REFERENCES scheduler.scheduled_execution (id),
  schedule_id     bigint      NOT NULL,
  tenant          text        NOT NULL,
  scheduled_at    timestamptz NOT NULL,
  run_attempt     integer     NOT NULL,
  error           text,
  status          text        NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'SENT', 'FAILED')),
  attempt         integer     NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL DEFAULT now(),
  last_error      text,
  created_at      timestamptz NOT NULL DEFAULT now(),
  finished_at     timestamptz
);
CREATE INDEX notification_outbox_due ON scheduler.notification_outbox (next_attempt_at) WHERE status = 'PENDING';
CREATE INDEX notification_outbox_run ON scheduler.notification_outbox (run_id);
