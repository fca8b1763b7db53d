-- POST /admin/v1/config/rollouts is idempotent like every create: the key
-- and a hash of the request are kept with the rollout they started.
ALTER TABLE controlplane.rollouts
    ADD COLUMN idempotency_key text NULL,
    ADD COLUMN request_hash    text NULL;
CREATE UNIQUE INDEX rollouts_idempotency_key ON controlplane.rollouts (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
