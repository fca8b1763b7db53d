-- Control-plane configuration store. Everything lives in its own schema so
-- other components (the scheduler) can share the database without clashes.

-- The head row is locked FOR UPDATE by every write: versions are serialized
-- across replicas and gapless.
CREATE TABLE controlplane.config_head (
    id      boolean PRIMARY KEY DEFAULT true CHECK (id),
    version bigint  NOT NULL
);
INSERT INTO controlplane.config_head (id, version) VALUES (true, 0);

CREATE TABLE controlplane.config_versions (
    version     bigint      PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now(),
    author      text        NOT NULL,
    reason      text        NOT NULL DEFAULT '',
    rollback_of bigint      NULL
);

-- Temporal table: a row is one revision of one resource, live for versions
-- [version_from, version_to). body NULL is a deletion. A version writes rows
-- only for the resources it changes, so large kinds (API keys) are never
-- copied, and the state at any version N is the set of rows with
-- version_from <= N < coalesce(version_to, infinity) and a body.
CREATE TABLE controlplane.resources (
    kind         text   NOT NULL,
    name         text   NOT NULL,
    version_from bigint NOT NULL REFERENCES controlplane.config_versions (version),
    version_to   bigint NULL,
    body         jsonb  NULL,
    PRIMARY KEY (kind, name, version_from)
);
-- At most one current revision per resource; also the index for Get, List
-- (keyset by name) and the precondition lookups of every write.
CREATE UNIQUE INDEX resources_current ON controlplane.resources (kind, name) WHERE version_to IS NULL;
-- Incremental refresh of the in-memory head config: rows newer than a version.
CREATE INDEX resources_version_from ON controlplane.resources (version_from);
-- Listing a consumer's API keys.
CREATE INDEX resources_apikey_consumer ON controlplane.resources ((body ->> 'consumer'), name)
    WHERE kind = 'apikeys' AND version_to IS NULL AND body IS NOT NULL;

-- Who changed what. diff is {"before": <resource|null>, "after": <resource|null>};
-- resources never hold secrets (API keys are stored as SHA-256 hashes).
CREATE TABLE controlplane.audit (
    id      bigserial   PRIMARY KEY,
    version bigint      NOT NULL REFERENCES controlplane.config_versions (version),
    at      timestamptz NOT NULL DEFAULT now(),
    author  text        NOT NULL,
    action  text        NOT NULL CHECK (action IN ('create', 'update', 'delete', 'rollback')),
    kind    text        NOT NULL,
    name    text        NOT NULL,
    diff    jsonb       NOT NULL
);
CREATE INDEX audit_version ON controlplane.audit (version);

-- One row per version, written in the version's transaction; watchers mark
-- rows delivered once they have seen the version.
CREATE TABLE controlplane.outbox (
    id           bigserial   PRIMARY KEY,
    version      bigint      NOT NULL REFERENCES controlplane.config_versions (version),
    created_at   timestamptz NOT NULL DEFAULT now(),
    delivered_at timestamptz NULL
);
CREATE INDEX outbox_undelivered ON controlplane.outbox (version) WHERE delivered_at IS NULL;

-- The recorded response of every change made under an Idempotency-Key,
-- written in the change's own transaction.
CREATE TABLE controlplane.idempotency (
    key          text        PRIMARY KEY,
    method       text        NOT NULL,
    path         text        NOT NULL,
    request_hash text        NOT NULL,
    version      bigint      NOT NULL,
    status       int         NOT NULL,
    response     bytea       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX idempotency_created_at ON controlplane.idempotency (created_at);
