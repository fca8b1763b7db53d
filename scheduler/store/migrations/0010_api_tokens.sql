-- API tokens for the REST API (internal/pgtokens): a tenant's tokens carry
-- their tenant, which the API takes as the caller's; the bootstrap admin
-- token has none. Only the SHA-256 of a token is stored.
CREATE TABLE scheduler.api_tokens (
    id           text        PRIMARY KEY,
    hash         bytea       NOT NULL CHECK (length(hash) = 32),
    name         text        NOT NULL,
    roles        text[]      NOT NULL,
    tenant       text        CHECK (tenant <> ''),
    created_at   timestamptz NOT NULL DEFAULT now(),
    created_by   text        NOT NULL,
    expires_at   timestamptz,
    revoked_at   timestamptz,
    revoked_by   text,
    last_used_at timestamptz
);
CREATE INDEX api_tokens_tenant ON scheduler.api_tokens (tenant, id);
