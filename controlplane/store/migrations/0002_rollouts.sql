-- Rollout controller state (package controlplane/rollout).

-- At most one rollout runs at a time (partial unique index); finished ones
-- are kept as history. spec holds the normalized request (waves, bake,
-- thresholds); node_counts the last evaluated ACK/NACK counts.
CREATE TABLE controlplane.rollouts (
    id               bigserial   PRIMARY KEY,
    target_version   bigint      NOT NULL,
    baseline_version bigint      NOT NULL,
    spec             jsonb       NOT NULL,
    state            text        NOT NULL CHECK (state IN ('running', 'succeeded', 'rolled_back', 'aborted')),
    wave             integer     NOT NULL DEFAULT 0,
    wave_started_at  timestamptz NOT NULL,
    error            text        NOT NULL DEFAULT '',
    rollback_version bigint      NULL,
    node_counts      jsonb       NOT NULL DEFAULT '{}',
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL
);
CREATE UNIQUE INDEX rollouts_one_running ON controlplane.rollouts ((true)) WHERE state = 'running';

-- The version the fleet runs when no rollout does. head_seen is the head at
-- the last deploy decision: in auto mode, versions above it are deployed at
-- once. NULL until the first controller starts (it then takes the head).
CREATE TABLE controlplane.deployment (
    id               boolean PRIMARY KEY DEFAULT true CHECK (id),
    deployed_version bigint  NULL,
    head_seen        bigint  NULL
);
INSERT INTO controlplane.deployment (id) VALUES (true);

-- Each replica's view of its own xDS clients in the running rollout; the
-- leader evaluates waves on the union. Rows go when the rollout ends, when
-- the node leaves the replica, or when the replica stops reporting.
CREATE TABLE controlplane.rollout_reports (
    rollout_id bigint      NOT NULL REFERENCES controlplane.rollouts (id) ON DELETE CASCADE,
    node_id    text        NOT NULL,
    replica_id text        NOT NULL,
    "group"    text        NOT NULL,
    state      text        NOT NULL CHECK (state IN ('pending', 'acked', 'nacked')),
    error      text        NOT NULL DEFAULT '',
    wave       integer     NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (rollout_id, node_id, replica_id)
);

-- Replica heartbeats: which rollout and wave each live replica has applied,
-- so the leader decides early only once every replica has reported the wave.
CREATE TABLE controlplane.rollout_replicas (
    replica_id text        PRIMARY KEY,
    rollout_id bigint      NULL,
    wave       integer     NOT NULL DEFAULT 0,
    seen_at    timestamptz NOT NULL
);
