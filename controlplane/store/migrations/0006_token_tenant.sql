-- Token tables share one shape (internal/pgtokens): the control plane's
-- operator tokens are never tenant-bound, but the column is there.
ALTER TABLE controlplane.api_tokens ADD COLUMN tenant text;
