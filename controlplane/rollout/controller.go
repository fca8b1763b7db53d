package rollout

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-io/portico/controlplane/nodes"
	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/controlplane/xds"
)

// Defaults for zero Config fields.
const (
	DefaultTick      = time.Second
	DefaultReportTTL = 30 * time.Second
	// DefaultPassTimeout bounds one pass of the loop (DB reads and writes,
	// snapshot loading, a rollback).
	DefaultPassTimeout = 30 * time.Second
	// DefaultListLimit and MaxListLimit bound List.
	DefaultListLimit = 20
	MaxListLimit     = 100
)

// XDS is the part of the xDS server the controller drives; *xds.Server
// implements it.
type XDS interface {
	SetPolicy(ctx context.Context, p xds.Policy) error
	Retarget(ctx context.Context) error
}

var (
	_ XDS        = (*xds.Server)(nil)
	_ xds.Policy = (*Controller)(nil)
)

// Config configures a Controller. Zero values take the defaults.
type Config struct {
	// DatabaseURL is the Postgres the config store uses (required); its
	// migrations must have run (store.Open).
	DatabaseURL string
	// Mode is ModeAuto (default) or ModeManual.
	Mode string
	// Tracker is this replica's node tracker (required).
	Tracker *nodes.Tracker
	// XDS is this replica's xDS server (required).
	XDS XDS
	// Snapshots returns the compiled snapshot of a config version (required).
	// The controller calls it outside the xDS path and keeps the result, so
	// it may be slow; it must return the same content for the same version.
	Snapshots func(ctx context.Context, version int64) (cache.ResourceSnapshot, error)
	// Rollback creates a new config version whose content equals version to
	// and returns it (required). reason is recorded with the version.
	Rollback func(ctx context.Context, to int64, reason string) (int64, error)
	// ReplicaID names this replica in reports; default host-pid-random.
	ReplicaID string
	// Registerer receives the rollout metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Tick is the period of Run's passes.
	Tick time.Duration
	// ReportTTL is how long a replica's report counts without a refresh.
	ReportTTL time.Duration

	// timeNow is the clock (tests step it).
	timeNow func() time.Time
}

// Controller runs rollouts for one control-plane replica. It is safe for
// concurrent use; SnapshotFor never blocks on I/O.
type Controller struct {
	cfg  Config
	pool *pgxpool.Pool
	log  *slog.Logger
	m    *metrics

	view   atomic.Pointer[view]
	leader atomic.Bool

	// mu serializes passes, Start and Abort, and guards what follows.
	mu        sync.Mutex
	lockConn  *pgx.Conn // dedicated session holding (or trying) the leader lock
	snaps     map[int64]cache.ResourceSnapshot
	policySet bool
}

// view is what SnapshotFor decides from; replaced, never modified.
type view struct {
	running          *Rollout // nil when none runs
	target, baseline cache.ResourceSnapshot
	deployedVersion  int64
	deployed         cache.ResourceSnapshot // nil when following the head and not needed
	followsHead      bool
}

func (v *view) same(o *view) bool {
	if v == nil || o == nil {
		return v == o
	}
	if (v.running == nil) != (o.running == nil) {
		return false
	}
	if v.running != nil {
		return v.running.ID == o.running.ID && v.running.Wave == o.running.Wave
	}
	return v.deployedVersion == o.deployedVersion && v.followsHead == o.followsHead && v.deployed == o.deployed
}

// New connects to Postgres, loads the current deployment and installs the
// controller as xDS policy. Call Run to follow and drive rollouts, and
// Close when done.
func New(ctx context.Context, cfg Config) (*Controller, error) {
	switch {
	case cfg.DatabaseURL == "":
		return nil, errors.New("rollout: DatabaseURL is required")
	case cfg.Tracker == nil:
		return nil, errors.New("rollout: Tracker is required")
	case cfg.XDS == nil:
		return nil, errors.New("rollout: XDS is required")
	case cfg.Snapshots == nil:
		return nil, errors.New("rollout: Snapshots is required")
	case cfg.Rollback == nil:
		return nil, errors.New("rollout: Rollback is required")
	case cfg.Tick < 0 || cfg.ReportTTL < 0:
		return nil, errors.New("rollout: Tick and ReportTTL must not be negative")
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeAuto
	}
	if cfg.Mode != ModeAuto && cfg.Mode != ModeManual {
		return nil, fmt.Errorf("rollout: Mode must be %q or %q, not %q", ModeAuto, ModeManual, cfg.Mode)
	}
	if cfg.Tick == 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.ReportTTL == 0 {
		cfg.ReportTTL = DefaultReportTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.timeNow == nil {
		cfg.timeNow = time.Now
	}
	if cfg.ReplicaID == "" {
		cfg.ReplicaID = defaultReplicaID()
	}
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("rollout: database URL: %w", err)
	}
	pc.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("rollout: connect: %w", err)
	}
	c := &Controller{
		cfg: cfg, pool: pool, log: cfg.Logger.With("replica", cfg.ReplicaID),
		m: newMetrics(cfg.Registerer), snaps: map[int64]cache.ResourceSnapshot{},
	}
	// The first controller on a database takes the head as deployed.
	if _, err := pool.Exec(ctx, `UPDATE controlplane.deployment d
		SET deployed_version = h.version, head_seen = h.version
		FROM controlplane.config_head h WHERE d.deployed_version IS NULL`); err != nil {
		pool.Close()
		return nil, fmt.Errorf("rollout: init deployment: %w", err)
	}
	c.mu.Lock()
	err = c.refresh(ctx)
	c.mu.Unlock()
	if err != nil {
		pool.Close()
		return nil, err
	}
	return c, nil
}

func defaultReplicaID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// ReplicaID returns the id this replica reports under.
func (c *Controller) ReplicaID() string { return c.cfg.ReplicaID }

// Leader reports whether this replica held the leader lock at its last pass.
func (c *Controller) Leader() bool { return c.leader.Load() }

// Close releases the leader lock and the database connections. The
// controller stays installed as xDS policy with its last view.
func (c *Controller) Close() {
	c.mu.Lock()
	c.resignLocked(context.Background())
	c.mu.Unlock()
	c.pool.Close()
}

// Run makes a pass every Tick until ctx is done, then gives up leadership.
// Errors of a pass are logged and retried on the next one.
func (c *Controller) Run(ctx context.Context) error {
	defer func() {
		c.mu.Lock()
		c.resignLocked(ctx)
		c.mu.Unlock()
	}()
	t := time.NewTicker(c.cfg.Tick)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, DefaultPassTimeout)
		err := c.Step(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			c.log.Warn("rollout: pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Step makes one pass: try to lead, re-read the rollout state and apply it
// to the xDS server, report this replica's nodes and, when leading,
// evaluate the running wave. Run calls it every Tick; tests call it
// directly.
func (c *Controller) Step(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.elect(ctx)
	if err := c.refresh(ctx); err != nil {
		return err
	}
	v := c.view.Load()
	if err := c.report(ctx, v); err != nil {
		return err
	}
	if !c.leader.Load() {
		return nil
	}
	changed, err := c.lead(ctx, v)
	if err != nil {
		return err
	}
	if changed {
		return c.refresh(ctx)
	}
	return nil
}

// elect keeps or tries to take the leader lock. Losing the session loses
// the lock; the conditional updates in lead keep a deposed leader that has
// not noticed yet from undoing the new leader's decisions.
func (c *Controller) elect(ctx context.Context) {
	if c.lockConn != nil && c.leader.Load() {
		if err := c.lockConn.Ping(ctx); err == nil {
			return
		}
		c.log.Warn("rollout: lost the leader session")
		c.resignLocked(ctx)
	}
	if c.lockConn == nil {
		conn, err := pgx.Connect(ctx, c.cfg.DatabaseURL)
		if err != nil {
			c.log.Warn("rollout: leader election: connect", "err", err)
			return
		}
		c.lockConn = conn
	}
	var ok bool
	if err := c.lockConn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", leaderLockKey).Scan(&ok); err != nil {
		c.log.Warn("rollout: leader election", "err", err)
		c.resignLocked(ctx)
		return
	}
	if ok {
		c.leader.Store(true)
		c.log.Info("rollout: leading")
	}
}

func (c *Controller) resignLocked(ctx context.Context) {
	if c.lockConn != nil {
		// Also when ctx is done: the session must end to release the lock.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = c.lockConn.Close(ctx) // closing the session releases the lock
		cancel()
		c.lockConn = nil
	}
	if c.leader.Swap(false) {
		c.log.Info("rollout: no longer leading")
	}
	c.m.nackRatio.Set(0)
}

func (c *Controller) now() time.Time { return c.cfg.timeNow().UTC() }

// snapshot returns version's snapshot, from the cache or Config.Snapshots.
func (c *Controller) snapshot(ctx context.Context, v int64) (cache.ResourceSnapshot, error) {
	if s, ok := c.snaps[v]; ok {
		return s, nil
	}
	s, err := c.cfg.Snapshots(ctx, v)
	if err != nil {
		return nil, fmt.Errorf("rollout: snapshot of version %d: %w", v, err)
	}
	c.snaps[v] = s
	return s, nil
}

// refresh re-reads the deployment and the running rollout, loads the
// snapshots they need, swaps the view and re-targets the xDS server when
// the view changed. On error the previous view stays in force.
func (c *Controller) refresh(ctx context.Context) error {
	f, err := readFleet(ctx, c.pool, false)
	if err != nil {
		return err
	}
	prev := c.view.Load()
	nv := &view{}
	need := map[int64]bool{}
	if r := f.running; r != nil {
		nv.running = r
		if nv.target, err = c.snapshot(ctx, r.TargetVersion); err != nil {
			return err
		}
		if nv.baseline, err = c.snapshot(ctx, r.BaselineVersion); err != nil {
			return err
		}
		need[r.TargetVersion], need[r.BaselineVersion] = true, true
	} else {
		nv.deployedVersion, nv.followsHead = f.effective(c.cfg.Mode)
		// Following the head, the publisher's latest snapshot is served; the
		// deployed snapshot only bridges the moment after a rollout ends,
		// before the publisher has caught up with the head.
		bridge := prev != nil && (prev.running != nil || !prev.followsHead)
		if prev != nil && prev.followsHead && prev.deployed != nil && prev.deployedVersion == nv.deployedVersion {
			bridge = true
		}
		if !nv.followsHead || bridge {
			if nv.deployed, err = c.snapshot(ctx, nv.deployedVersion); err != nil {
				return err
			}
			need[nv.deployedVersion] = true
		}
	}
	for v := range c.snaps {
		if !need[v] {
			delete(c.snaps, v)
		}
	}
	c.view.Store(nv)
	if f.running != nil {
		c.m.wave.Set(float64(f.running.Wave + 1))
	} else {
		c.m.wave.Set(0)
	}
	switch {
	case !c.policySet:
		if err := c.cfg.XDS.SetPolicy(ctx, c); err != nil {
			return fmt.Errorf("rollout: set xds policy: %w", err)
		}
		c.policySet = true
	case !nv.same(prev):
		if r := nv.running; r != nil {
			c.log.Info("rollout: applying", "rollout", r.ID, "wave", r.Wave, "target", r.TargetVersion, "baseline", r.BaselineVersion)
		} else {
			c.log.Info("rollout: applying deployment", "version", nv.deployedVersion, "followsHead", nv.followsHead)
		}
		if err := c.cfg.XDS.Retarget(ctx); err != nil {
			return fmt.Errorf("rollout: retarget: %w", err)
		}
	}
	return nil
}

// SnapshotFor implements xds.Policy: rollout nodes get the target, other
// nodes the baseline; without a rollout, the deployed version (nil, that
// is latest, when auto mode follows the head and latest is not behind it).
func (c *Controller) SnapshotFor(node nodes.Status, latest cache.ResourceSnapshot) cache.ResourceSnapshot {
	v := c.view.Load()
	if v == nil {
		return nil
	}
	if r := v.running; r != nil {
		if member(r.Waves, r.Wave, node) {
			return v.target
		}
		return v.baseline
	}
	if v.followsHead && (v.deployed == nil || versionOf(latest) >= v.deployedVersion) {
		return nil
	}
	return v.deployed
}

func versionOf(s cache.ResourceSnapshot) int64 {
	if s == nil {
		return -1
	}
	n, err := strconv.ParseInt(s.GetVersion(resource.ListenerType), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// nodeState is a node's answer to target: acked when every type it has
// been sent is at target, nacked when any type rejected target.
func nodeState(n nodes.Status, target string) (state, msg string) {
	if len(n.Types) == 0 {
		return nodePending, ""
	}
	state = nodeAcked
	for _, ts := range n.Types {
		switch {
		case ts.AckedVersion == target:
		case ts.Nack != nil && ts.Nack.Version == target:
			return nodeNacked, ts.Nack.Error
		default:
			state = nodePending
		}
	}
	return state, ""
}

// report upserts this replica's rollout nodes, drops its rows for nodes
// that left, and records which rollout and wave it has applied.
func (c *Controller) report(ctx context.Context, v *view) error {
	now := c.now()
	var rolloutID *int64
	wave := 0
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("rollout: report: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if r := v.running; r != nil {
		rolloutID, wave = &r.ID, r.Wave
		target := strconv.FormatInt(r.TargetVersion, 10)
		// Non-nil: a NULL array would make the DELETE below keep every row.
		ids, groups, states, msgs := []string{}, []string{}, []string{}, []string{}
		for _, n := range c.cfg.Tracker.List() {
			if n.SecurityChannel || !member(r.Waves, r.Wave, n) {
				continue // security-channel nodes follow the head, not waves
			}
			st, msg := nodeState(n, target)
			ids, groups, states, msgs = append(ids, n.ID), append(groups, n.Group), append(states, st), append(msgs, msg)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO controlplane.rollout_reports
			(rollout_id, node_id, replica_id, "group", state, error, wave, updated_at)
			SELECT $1, t.n, $2, t.g, t.s, t.e, $3, $4
			FROM unnest($5::text[], $6::text[], $7::text[], $8::text[]) AS t(n, g, s, e)
			ON CONFLICT (rollout_id, node_id, replica_id) DO UPDATE SET "group" = excluded."group",
				state = excluded.state, error = excluded.error, wave = excluded.wave, updated_at = excluded.updated_at`,
			r.ID, c.cfg.ReplicaID, r.Wave, now, ids, groups, states, msgs); err != nil {
			return fmt.Errorf("rollout: report: %w", err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM controlplane.rollout_reports
			WHERE replica_id = $1 AND (rollout_id <> $2 OR NOT (node_id = ANY($3::text[])))`,
			c.cfg.ReplicaID, r.ID, ids); err != nil {
			return fmt.Errorf("rollout: report: %w", err)
		}
	} else if _, err := tx.Exec(ctx, `DELETE FROM controlplane.rollout_reports WHERE replica_id = $1`, c.cfg.ReplicaID); err != nil {
		return fmt.Errorf("rollout: report: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO controlplane.rollout_replicas (replica_id, rollout_id, wave, seen_at)
		VALUES ($1, $2, $3, $4) ON CONFLICT (replica_id) DO UPDATE
		SET rollout_id = excluded.rollout_id, wave = excluded.wave, seen_at = excluded.seen_at`,
		c.cfg.ReplicaID, rolloutID, wave, now); err != nil {
		return fmt.Errorf("rollout: heartbeat: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("rollout: report: %w", err)
	}
	return nil
}

// lead is the leader's part of a pass. It reports whether the persisted
// state changed (so the caller re-applies it).
func (c *Controller) lead(ctx context.Context, v *view) (bool, error) {
	now := c.now()
	cutoff := now.Add(-c.cfg.ReportTTL)
	// Forget replicas and reports that stopped refreshing.
	if _, err := c.pool.Exec(ctx, `DELETE FROM controlplane.rollout_reports WHERE updated_at < $1`, cutoff); err != nil {
		return false, fmt.Errorf("rollout: prune reports: %w", err)
	}
	if _, err := c.pool.Exec(ctx, `DELETE FROM controlplane.rollout_replicas WHERE seen_at < $1`, cutoff.Add(-c.cfg.ReportTTL)); err != nil {
		return false, fmt.Errorf("rollout: prune replicas: %w", err)
	}
	r := v.running
	if r == nil {
		c.m.nackRatio.Set(0)
		if c.cfg.Mode != ModeAuto {
			return false, nil
		}
		// Record that auto mode deployed the head, so the deployment stays
		// right if the fleet switches to manual mode.
		tag, err := c.pool.Exec(ctx, `UPDATE controlplane.deployment d
			SET deployed_version = h.version, head_seen = h.version
			FROM controlplane.config_head h
			WHERE h.version > d.head_seen AND NOT EXISTS
				(SELECT 1 FROM controlplane.rollouts WHERE state = 'running')`)
		if err != nil {
			return false, fmt.Errorf("rollout: follow head: %w", err)
		}
		return tag.RowsAffected() > 0, nil
	}

	t, err := countReports(ctx, c.pool, r.ID, cutoff)
	if err != nil {
		return false, err
	}
	caughtUp, err := replicasCaughtUp(ctx, c.pool, r.ID, r.Wave, cutoff)
	if err != nil {
		return false, err
	}
	ratio := t.ratio()
	c.m.nackRatio.Set(ratio)
	baked := !now.Before(r.WaveStartedAt.Add(time.Duration(r.BakeSeconds) * time.Second))
	settled := caughtUp && t.Total > 0 && t.Pending == 0 && t.Total >= r.MinNodes
	failed := t.Nacked > 0 && ratio > r.MaxNackRatio

	switch {
	case failed && (settled || baked || r.MaxNackRatio == 0):
		reason := fmt.Sprintf("wave %d: %d of %d nodes NACKed version %d (ratio %.3f > maxNackRatio %.3f); node %s: %s",
			r.Wave, t.Nacked, t.Total, r.TargetVersion, ratio, r.MaxNackRatio, t.sampleNode, t.sampleError)
		return true, c.rollback(ctx, r, t.NodeCounts, reason, now)
	case baked && t.Total >= r.MinNodes && r.Wave+1 < len(r.Waves):
		tag, err := c.pool.Exec(ctx, `UPDATE controlplane.rollouts
			SET wave = wave + 1, wave_started_at = $3, updated_at = $3, node_counts = $4
			WHERE id = $1 AND wave = $2 AND state = 'running'`, r.ID, r.Wave, now, countsJSON(t.NodeCounts))
		if err != nil {
			return false, fmt.Errorf("rollout: next wave: %w", err)
		}
		c.log.Info("rollout: next wave", "rollout", r.ID, "wave", r.Wave+1, "nodes", t.NodeCounts)
		return tag.RowsAffected() > 0, nil
	case baked && t.Total >= r.MinNodes:
		return true, c.finish(ctx, r, StateSucceeded, t.NodeCounts, "", r.TargetVersion, nil, now)
	}
	if t.NodeCounts != r.Nodes {
		if _, err := c.pool.Exec(ctx, `UPDATE controlplane.rollouts SET node_counts = $2
			WHERE id = $1 AND state = 'running'`, r.ID, countsJSON(t.NodeCounts)); err != nil {
			return false, fmt.Errorf("rollout: record counts: %w", err)
		}
	}
	return false, nil
}

func countsJSON(n NodeCounts) []byte {
	b, _ := json.Marshal(n) //nolint:errchkjson // plain ints
	return b
}

// rollback creates the version equal to the baseline and makes it the
// deployed one. A failure leaves the rollout running; the next pass
// decides again.
func (c *Controller) rollback(ctx context.Context, r *Rollout, n NodeCounts, reason string, now time.Time) error {
	c.log.Warn("rollout: rolling back", "rollout", r.ID, "reason", reason)
	to, err := c.cfg.Rollback(ctx, r.BaselineVersion, fmt.Sprintf("rollout %d rolled back: %s", r.ID, reason))
	if err != nil {
		return fmt.Errorf("rollout: rollback of rollout %d to version %d: %w", r.ID, r.BaselineVersion, err)
	}
	return c.finish(ctx, r, StateRolledBack, n, reason, to, &to, now)
}

// finish ends rollout r in state with deployed as the deployed version.
func (c *Controller) finish(ctx context.Context, r *Rollout, state State, n NodeCounts, reason string, deployed int64, rollbackVersion *int64, now time.Time) error {
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("rollout: finish: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	tag, err := tx.Exec(ctx, `UPDATE controlplane.rollouts
		SET state = $2, error = $3, rollback_version = $4, node_counts = $5, updated_at = $6
		WHERE id = $1 AND state = 'running'`, r.ID, string(state), reason, rollbackVersion, countsJSON(n), now)
	if err != nil {
		return fmt.Errorf("rollout: finish: %w", err)
	}
	if tag.RowsAffected() > 0 {
		if _, err := tx.Exec(ctx, `UPDATE controlplane.deployment
			SET deployed_version = $1, head_seen = greatest(head_seen, $1)`, deployed); err != nil {
			return fmt.Errorf("rollout: finish: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM controlplane.rollout_reports WHERE rollout_id = $1`, r.ID); err != nil {
		return fmt.Errorf("rollout: finish: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("rollout: finish: %w", err)
	}
	if tag.RowsAffected() > 0 {
		c.m.results.WithLabelValues(string(state)).Inc()
		c.log.Info("rollout: ended", "rollout", r.ID, "state", state, "deployed", deployed, "nodes", n)
	}
	return nil
}

// Start begins a rollout of s from the deployed version. It returns
// ErrRolloutRunning when one runs, and a *spec.FieldError for an invalid
// spec (waves, percent, groups, bakeSeconds, maxNackRatio, minNodes, and a
// targetVersion that does not exist or equals the deployed version).
func (c *Controller) Start(ctx context.Context, s Spec) (Rollout, error) {
	r, _, err := c.StartOnce(ctx, "", "", s)
	return r, err
}

// StartOnce is Start with an idempotency key (empty: none). A key already
// used with the same requestHash returns the rollout it started (replayed
// true), whatever its state now; with another hash, ErrIdempotencyMismatch.
func (c *Controller) StartOnce(ctx context.Context, key, requestHash string, s Spec) (r Rollout, replayed bool, err error) {
	if key != "" {
		r, replayed, err = c.replay(ctx, key, requestHash)
		if replayed || err != nil {
			return r, replayed, err
		}
	}
	r, err = c.start(ctx, key, requestHash, s)
	if err != nil && key != "" && errors.Is(err, errKeyTaken) {
		// A concurrent request with the same key won the insert.
		return c.replay(ctx, key, requestHash)
	}
	return r, false, err
}

// errKeyTaken reports a unique violation on the idempotency key.
var errKeyTaken = errors.New("rollout: idempotency key taken")

func (c *Controller) replay(ctx context.Context, key, requestHash string) (Rollout, bool, error) {
	var id int64
	var hash string
	err := c.pool.QueryRow(ctx, `SELECT id, coalesce(request_hash, '') FROM controlplane.rollouts WHERE idempotency_key = $1`, key).Scan(&id, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return Rollout{}, false, nil
	}
	if err != nil {
		return Rollout{}, false, fmt.Errorf("rollout: idempotency lookup: %w", err)
	}
	if hash != requestHash {
		return Rollout{}, false, ErrIdempotencyMismatch
	}
	r, err := getRollout(ctx, c.pool, id)
	return r, err == nil, err
}

func (c *Controller) start(ctx context.Context, key, requestHash string, s Spec) (Rollout, error) {
	s, err := s.normalize()
	if err != nil {
		return Rollout{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return Rollout{}, fmt.Errorf("rollout: start: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	f, err := readFleet(ctx, tx, true)
	if err != nil {
		return Rollout{}, err
	}
	if f.running != nil {
		return Rollout{}, fmt.Errorf("%w (rollout %d)", ErrRolloutRunning, f.running.ID)
	}
	baseline, _ := f.effective(c.cfg.Mode)
	if s.TargetVersion == 0 {
		s.TargetVersion = f.head
	}
	switch {
	case s.TargetVersion > f.head || s.TargetVersion < 1:
		return Rollout{}, fieldErr("targetVersion", spec.CodeUnknownRef, "version %d does not exist (head is %d)", s.TargetVersion, f.head)
	case s.TargetVersion == baseline:
		return Rollout{}, fieldErr("targetVersion", spec.CodeInvalid, "version %d is already deployed", baseline)
	}
	specJSON, err := json.Marshal(s)
	if err != nil {
		return Rollout{}, fmt.Errorf("rollout: start: %w", err)
	}
	rows, err := tx.Query(ctx, `INSERT INTO controlplane.rollouts
		(target_version, baseline_version, spec, state, wave, wave_started_at, created_at, updated_at, idempotency_key, request_hash)
		VALUES ($1, $2, $3, 'running', 0, $4, $4, $4, nullif($5, ''), nullif($6, '')) RETURNING `+rolloutColumns,
		s.TargetVersion, baseline, specJSON, now, key, requestHash)
	if err != nil {
		return Rollout{}, fmt.Errorf("rollout: start: %w", err)
	}
	r, err := pgx.CollectExactlyOneRow(rows, scanRollout)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return Rollout{}, uniqueViolation(pe)
		}
		return Rollout{}, fmt.Errorf("rollout: start: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE controlplane.deployment SET deployed_version = $1, head_seen = $2`, baseline, f.head); err != nil {
		return Rollout{}, fmt.Errorf("rollout: start: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return Rollout{}, uniqueViolation(pe)
		}
		return Rollout{}, fmt.Errorf("rollout: start: %w", err)
	}
	c.log.Info("rollout: started", "rollout", r.ID, "target", r.TargetVersion, "baseline", r.BaselineVersion, "waves", len(r.Waves))
	if err := c.refresh(ctx); err != nil {
		// Committed: the next pass applies it.
		c.log.Warn("rollout: apply after start", "rollout", r.ID, "err", err)
	}
	return r, nil
}

func uniqueViolation(pe *pgconn.PgError) error {
	if pe.ConstraintName == "rollouts_idempotency_key" {
		return errKeyTaken
	}
	return ErrRolloutRunning
}

// Abort ends running rollout id: every node returns to the baseline and no
// version is made. ErrNotRunning when it has ended, ErrNotFound when it
// does not exist.
func (c *Controller) Abort(ctx context.Context, id int64) (Rollout, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, err := getRollout(ctx, c.pool, id)
	if err != nil {
		return Rollout{}, err
	}
	if r.State != StateRunning {
		return r, fmt.Errorf("%w: rollout %d is %s", ErrNotRunning, id, r.State)
	}
	t, err := countReports(ctx, c.pool, id, c.now().Add(-c.cfg.ReportTTL))
	if err != nil {
		return Rollout{}, err
	}
	if err := c.finish(ctx, &r, StateAborted, t.NodeCounts, "aborted", r.BaselineVersion, nil, c.now()); err != nil {
		return Rollout{}, err
	}
	if err := c.refresh(ctx); err != nil {
		c.log.Warn("rollout: apply after abort", "rollout", id, "err", err)
	}
	r, err = getRollout(ctx, c.pool, id)
	if err == nil && r.State != StateAborted {
		err = fmt.Errorf("%w: rollout %d is %s", ErrNotRunning, id, r.State)
	}
	return r, err
}

// Get returns rollout id (ErrNotFound when there is none).
func (c *Controller) Get(ctx context.Context, id int64) (Rollout, error) {
	r, err := getRollout(ctx, c.pool, id)
	if err != nil {
		return Rollout{}, err
	}
	return r, c.liveCounts(ctx, &r)
}

// List returns the newest rollouts first, at most limit (DefaultListLimit
// when 0, capped at MaxListLimit).
func (c *Controller) List(ctx context.Context, limit int) ([]Rollout, error) {
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	rows, err := c.pool.Query(ctx, `SELECT `+rolloutColumns+` FROM controlplane.rollouts ORDER BY id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("rollout: list: %w", err)
	}
	rs, err := pgx.CollectRows(rows, scanRollout)
	if err != nil {
		return nil, fmt.Errorf("rollout: list: %w", err)
	}
	for i := range rs {
		if err := c.liveCounts(ctx, &rs[i]); err != nil {
			return nil, err
		}
	}
	return rs, nil
}

func (c *Controller) liveCounts(ctx context.Context, r *Rollout) error {
	if r.State != StateRunning {
		return nil
	}
	t, err := countReports(ctx, c.pool, r.ID, c.now().Add(-c.cfg.ReportTTL))
	if err != nil {
		return err
	}
	r.Nodes = t.NodeCounts
	return nil
}

// Deployed returns the version the fleet runs outside a running rollout's
// waves: the baseline while a rollout runs; otherwise the last rollout's
// result, or in auto mode the head when it is newer.
func (c *Controller) Deployed(ctx context.Context) (int64, error) {
	f, err := readFleet(ctx, c.pool, false)
	if err != nil {
		return 0, err
	}
	v, _ := f.effective(c.cfg.Mode)
	return v, nil
}
