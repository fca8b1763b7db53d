-- Per-tenant token buckets for the dispatch rate: tokens as of updated_at
-- (database clock). Rows are created on a tenant's first claim and only
-- touched under that tenant's claim advisory lock.
CREATE TABLE scheduler.tenant_bucket (
  tenant     text             PRIMARY KEY,
  tokens     double precision NOT NULL,
  updated_at timestamptz      NOT NULL
);
