-- Operator API tokens (issue 19). Only the SHA-256 of a token is stored;
-- the token itself is shown once, at creation. A revoked token keeps its
-- row (revoked_at set) so the listing shows who revoked what, and when.
CREATE TABLE controlplane.api_tokens (
    id           text        PRIMARY KEY,
    hash         bytea       NOT NULL CHECK (length(hash) = 32),
    name         text        NOT NULL,
    roles        text[]      NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    created_by   text        NOT NULL,
    expires_at   timestamptz,
    revoked_at   timestamptz,
    revoked_by   text,
    last_used_at timestamptz
);

-- The audit author is the authenticated principal; what a client said about
-- itself (X-Portico-Author) is kept beside it as a note.
ALTER TABLE controlplane.audit ADD COLUMN note text NOT NULL DEFAULT '';
