-- 1024 logical shards of schedule_id (shard = schedule_id % 1024), each
-- leased by one runner process with an epoch bumped on every change of
-- owner. A fire transaction locks its shards' rows FOR SHARE and checks
-- owner, epoch and expiry, so a zombie owner's writes fail once another
-- process has taken the shard. runner_member is the live-runner set the
-- shares are computed from.
CREATE TABLE scheduler.shard_lease (
  shard      smallint    PRIMARY KEY CHECK (shard BETWEEN 0 AND 1023),
  owner      text,
  epoch      bigint      NOT NULL DEFAULT 0,
  expires_at timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO scheduler.shard_lease (shard) SELECT g FROM generate_series(0, 1023) g;
CREATE TABLE scheduler.runner_member (
  id         text        PRIMARY KEY,
  expires_at timestamptz NOT NULL
);
