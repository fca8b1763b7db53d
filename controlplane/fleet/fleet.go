// Package fleet shares node status between control-plane replicas. Each
// replica's xDS clients are tracked in memory (package nodes); fleet
// publishes that view to Postgres every Interval and reads the other
// replicas' rows back, so any replica's admin API lists every connected
// client with its ACK/NACK state.
//
// Remote entries are at most Interval old; rows not refreshed within TTL
// (a crashed replica) are ignored and eventually deleted.
package fleet

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/portico-io/portico/controlplane/nodes"
)

// Defaults for Config.
const (
	DefaultInterval = 2 * time.Second
	DefaultTTL      = 10 * time.Second
)

// Config configures a View. DatabaseURL, Tracker and ReplicaID are required.
type Config struct {
	DatabaseURL string
	Tracker     *nodes.Tracker
	ReplicaID   string
	Interval    time.Duration
	TTL         time.Duration
	Logger      *slog.Logger
}

// View is the fleet-wide node list. It is safe for concurrent use; List
// never blocks on the database.
type View struct {
	cfg    Config
	pool   *pgxpool.Pool
	remote atomic.Pointer[[]nodes.Status]
}

// New connects to Postgres. Call Run to publish and refresh, Close after.
func New(ctx context.Context, cfg Config) (*View, error) {
	switch {
	case cfg.DatabaseURL == "":
		return nil, errors.New("fleet: DatabaseURL is required")
	case cfg.Tracker == nil:
		return nil, errors.New("fleet: Tracker is required")
	case cfg.ReplicaID == "":
		return nil, errors.New("fleet: ReplicaID is required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	pc.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	v := &View{cfg: cfg, pool: pool}
	empty := []nodes.Status{}
	v.remote.Store(&empty)
	return v, nil
}

// Close releases the pool.
func (v *View) Close() { v.pool.Close() }

// DefaultReplicaID names a replica by host, process and a random suffix
// (several replicas may share a process in tests).
func DefaultReplicaID() string {
	h, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%x", h, os.Getpid(), b)
}

// Run publishes and refreshes every Interval until ctx is done, then removes
// this replica's rows so its nodes vanish at once rather than after TTL.
func (v *View) Run(ctx context.Context) error {
	t := time.NewTicker(v.cfg.Interval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, v.cfg.Interval)
		err := v.Sync(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			v.cfg.Logger.Warn("fleet: sync failed", "err", err)
		}
		select {
		case <-ctx.Done():
			// ctx is done: the rows go with a context of their own.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_, _ = v.pool.Exec(dctx, `DELETE FROM controlplane.xds_nodes WHERE replica_id = $1`, v.cfg.ReplicaID)
			cancel()
			return nil
		case <-t.C:
		}
	}
}

// Sync makes one pass: write this replica's nodes, delete the ones that
// left, drop expired rows, and read the other replicas' nodes.
func (v *View) Sync(ctx context.Context) error {
	local := v.cfg.Tracker.List()
	ids := make([]string, 0, len(local))
	batch := &pgx.Batch{}
	for _, st := range local {
		st.Replica = v.cfg.ReplicaID
		body, err := json.Marshal(st)
		if err != nil {
			return fmt.Errorf("fleet: %w", err)
		}
		ids = append(ids, st.ID)
		batch.Queue(`INSERT INTO controlplane.xds_nodes (node_id, replica_id, status, updated_at)
			VALUES ($1, $2, $3, now())
			ON CONFLICT (node_id, replica_id) DO UPDATE SET status = excluded.status, updated_at = now()`,
			st.ID, v.cfg.ReplicaID, body)
	}
	batch.Queue(`DELETE FROM controlplane.xds_nodes WHERE replica_id = $1 AND NOT (node_id = ANY($2))`, v.cfg.ReplicaID, ids)
	batch.Queue(`DELETE FROM controlplane.xds_nodes WHERE updated_at < now() - $1::interval * 6`, v.cfg.TTL)
	if err := v.pool.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("fleet: publish: %w", err)
	}
	rows, err := v.pool.Query(ctx, `SELECT status FROM controlplane.xds_nodes
		WHERE replica_id <> $1 AND updated_at > now() - $2::interval`, v.cfg.ReplicaID, v.cfg.TTL)
	if err != nil {
		return fmt.Errorf("fleet: read: %w", err)
	}
	remote, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (nodes.Status, error) {
		var st nodes.Status
		var body []byte
		if err := r.Scan(&body); err != nil {
			return st, err
		}
		return st, json.Unmarshal(body, &st)
	})
	if err != nil {
		return fmt.Errorf("fleet: read: %w", err)
	}
	v.remote.Store(&remote)
	return nil
}

// List returns every node of the fleet: this replica's live state plus the
// other replicas' last published state, ordered by node id then replica.
// A node with streams on two replicas appears once per replica.
func (v *View) List() []nodes.Status {
	local := v.cfg.Tracker.List()
	out := make([]nodes.Status, 0, len(local)+len(*v.remote.Load()))
	for _, st := range local {
		st.Replica = v.cfg.ReplicaID
		out = append(out, st)
	}
	out = append(out, *v.remote.Load()...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].ID != out[j].ID {
			return out[i].ID < out[j].ID
		}
		return out[i].Replica < out[j].Replica
	})
	return out
}
