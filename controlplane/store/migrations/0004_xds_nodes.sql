-- Every replica's connected xDS clients (package controlplane/fleet), so the
-- admin API of any replica lists the whole fleet. Rows are refreshed every
-- few seconds; readers ignore rows older than a TTL, and a replica deletes
-- its own rows for nodes that left and on shutdown.
CREATE TABLE controlplane.xds_nodes (
    node_id    text        NOT NULL,
    replica_id text        NOT NULL,
    status     jsonb       NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (node_id, replica_id)
);
CREATE INDEX xds_nodes_updated_at ON controlplane.xds_nodes (updated_at);
