// Package cp is kvnode's consensus tier: keyspaces served by one
// hashicorp/raft group instead of the leaderless ring, for callers that need
// linearizable reads and writes, compare-and-set on a key's revision, and
// revisions usable as fencing tokens. The log and stable store is
// kvnode/raftlog (pebble), snapshots use Raft's file snapshot store, and
// the replicated state is an in-memory map rebuilt on start from the latest
// snapshot plus the log after it.
//
// Writes go through the leader's log; a follower answers with a
// *NotLeaderError naming the leader (the HTTP layer forwards). Linearizable
// reads run on the leader with a read index (no log entry: the commit
// index, a VerifyLeader heartbeat round, then waiting until that index is
// applied; see Group.linearize); stale reads answer from the local state.
package cp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/portico-io/portico/internal/tlsfiles"

	"github.com/portico-io/portico/kvnode/raftlog"
)

// Defaults for Config.
const (
	DefaultHeartbeatTimeout   = time.Second
	DefaultElectionTimeout    = time.Second
	DefaultLeaderLeaseTimeout = 500 * time.Millisecond
	DefaultApplyTimeout       = 5 * time.Second
	DefaultSnapshotThreshold  = 8192
	DefaultSnapshotInterval   = 2 * time.Minute
	DefaultTrailingLogs       = 10240
	DefaultSnapshotsRetained  = 2
)

// Peer is one voter of the initial configuration.
type Peer struct {
	ID   string
	Addr string // Raft transport host:port
}

// ParsePeers parses "id=host:port,id=host:port".
func ParsePeers(s string) ([]Peer, error) {
	var out []Peer
	seen := map[string]bool{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		id, addr, ok := strings.Cut(p, "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("cp: peer %q is not id=host:port", p)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("cp: peer %q: %w", p, err)
		}
		if seen[id] {
			return nil, fmt.Errorf("cp: peer id %q listed twice", id)
		}
		seen[id] = true
		out = append(out, Peer{ID: id, Addr: addr})
	}
	return out, nil
}

// Config configures a Group. Zero durations and counts take the defaults.
type Config struct {
	// NodeID is the Raft server id (kvnode's node id). Required.
	NodeID string
	// BindAddr is the Raft transport listen address. Required.
	BindAddr string
	// AdvertiseAddr is the address peers dial (default: BindAddr, with the
	// host name when its host is empty or unspecified).
	AdvertiseAddr string
	// HTTPAddr is this node's HTTP API address; the node publishes it
	// through the log when it becomes leader, so followers can forward.
	HTTPAddr string
	// DataDir holds the log (DataDir/log) and snapshots. Required.
	DataDir string
	// Bootstrap makes a node with no Raft state found the group with Peers
	// as voters (itself alone when Peers is empty). Safe on every node when
	// all are given the same Peers; a node with state ignores it.
	Bootstrap bool
	Peers     []Peer

	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// ApplyTimeout bounds a write or linearizable read.
	ApplyTimeout      time.Duration
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	// NoSync acknowledges log writes before fsync (tests only).
	NoSync bool
	// TLS, when set, makes the Raft transport mutual TLS: peers must
	// present a kvnode certificate of the trust domain, and dials present
	// this one. Nil is plain TCP (kvnode decides which is allowed).
	TLS    *tlsfiles.Files
	Logger *slog.Logger
	// LeaseCheckInterval is how often the leader looks for expired leases.
	LeaseCheckInterval time.Duration
	// Now is the clock for lease deadlines (default time.Now).
	Now func() time.Time
	// OnRestore is a test signal fired after the state is restored from a
	// snapshot (on start or when a leader sends one).
	OnRestore func()
}

func (c *Config) setDefaults() error {
	switch {
	case c.NodeID == "":
		return errors.New("cp: NodeID is required")
	case c.BindAddr == "":
		return errors.New("cp: BindAddr is required")
	case c.DataDir == "":
		return errors.New("cp: DataDir is required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.HeartbeatTimeout, DefaultHeartbeatTimeout)
	def(&c.ElectionTimeout, DefaultElectionTimeout)
	def(&c.LeaderLeaseTimeout, DefaultLeaderLeaseTimeout)
	def(&c.ApplyTimeout, DefaultApplyTimeout)
	def(&c.SnapshotInterval, DefaultSnapshotInterval)
	def(&c.LeaseCheckInterval, DefaultLeaseCheckInterval)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = DefaultTrailingLogs
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Group is this node's member of the Raft group. Safe for concurrent use.
type Group struct {
	cfg   Config
	raft  *raft.Raft
	fsm   *fsm
	store *raftlog.Store
	trans *raft.NetworkTransport
	// stream is trans's stream layer (fault drills: Partition).
	stream *stream
	// readyTerm is the latest term in which a read Barrier issued by this
	// node as leader completed: from then on the leader's commit index
	// covers every entry committed before its term (see linearize).
	readyTerm atomic.Uint64
	metrics   *requestMetrics

	leaseMu   sync.Mutex
	deadlines map[uint64]time.Time // leader only: lease id → expiry

	notify chan bool
	done   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

// Open opens the group's storage, starts Raft and, when configured and the
// node has no state, bootstraps the group. It does not wait for a leader.
// ctx bounds the opening only: the group runs until Close.
func Open(ctx context.Context, cfg Config) (*Group, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	hlog := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Info, Output: slogWriter{cfg.Logger}, DisableTime: true})
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("cp: %w", err)
	}
	store, err := raftlog.Open(filepath.Join(cfg.DataDir, "log"), raftlog.Options{NoSync: cfg.NoSync, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, DefaultSnapshotsRetained, hlog)
	if err != nil {
		_ = store.Close()
		return nil, fmt.Errorf("cp: snapshot store: %w", err)
	}
	adv, err := advertise(cfg.AdvertiseAddr, cfg.BindAddr)
	if err != nil {
		_ = store.Close()
		return nil, err
	}
	st, err := newStream(ctx, cfg.BindAddr, adv, cfg.TLS)
	if err != nil {
		_ = store.Close()
		return nil, fmt.Errorf("cp: raft transport on %s: %w", cfg.BindAddr, err)
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: st, MaxPool: 3, Timeout: 2 * time.Second, Logger: hlog})
	g := &Group{cfg: cfg, fsm: newFSM(), store: store, trans: trans, stream: st, notify: make(chan bool, 1), done: make(chan struct{}), deadlines: map[uint64]time.Time{}, metrics: newRequestMetrics()}
	g.fsm.onRestore = cfg.OnRestore

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	rc.NotifyCh = g.notify
	// Concurrent Apply calls queue up to MaxAppendEntries in the apply
	// channel and are appended (one synced log batch) and replicated
	// together: group commit.
	rc.BatchApplyCh = true
	rc.Logger = hlog
	if err := raft.ValidateConfig(rc); err != nil {
		_ = trans.Close()
		_ = store.Close()
		return nil, fmt.Errorf("cp: %w", err)
	}
	if cfg.Bootstrap {
		has, err := raft.HasExistingState(store, store, snaps)
		if err != nil {
			_ = trans.Close()
			_ = store.Close()
			return nil, fmt.Errorf("cp: %w", err)
		}
		if !has {
			peers := cfg.Peers
			if len(peers) == 0 {
				peers = []Peer{{ID: cfg.NodeID, Addr: string(trans.LocalAddr())}}
			}
			var conf raft.Configuration
			for _, p := range peers {
				conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
			}
			if err := raft.BootstrapCluster(rc, store, store, snaps, trans, conf); err != nil {
				_ = trans.Close()
				_ = store.Close()
				return nil, fmt.Errorf("cp: bootstrap: %w", err)
			}
		}
	}
	g.raft, err = raft.NewRaft(rc, g.fsm, store, store, snaps, trans)
	if err != nil {
		_ = trans.Close()
		_ = store.Close()
		return nil, fmt.Errorf("cp: start raft: %w", err)
	}
	// The group outlives ctx (it runs until Close): its loops keep ctx's
	// values but not its cancellation.
	bg := context.WithoutCancel(ctx)
	g.wg.Add(2)
	go g.watchLeadership(bg)
	go g.expireLeases(bg)
	return g, nil
}

// advertise resolves the address peers dial.
func advertise(configured, bind string) (net.Addr, error) {
	a := configured
	if a == "" {
		host, port, err := net.SplitHostPort(bind)
		if err != nil {
			return nil, fmt.Errorf("cp: bind address %q: %w", bind, err)
		}
		if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
			return nil, nil // the transport advertises its bound address
		}
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "127.0.0.1"
		}
		a = net.JoinHostPort(h, port)
	}
	addr, err := net.ResolveTCPAddr("tcp", a)
	if err != nil {
		return nil, fmt.Errorf("cp: advertise address %q: %w", a, err)
	}
	return addr, nil
}

// watchLeadership publishes this node's HTTP address each time it becomes
// leader. Raft blocks on NotifyCh, so this loop only hands work off.
func (g *Group) watchLeadership(ctx context.Context) {
	defer g.wg.Done()
	for {
		select {
		case <-g.done:
			return
		case leader := <-g.notify:
			if leader && g.cfg.HTTPAddr != "" {
				g.wg.Add(1)
				go func() {
					defer g.wg.Done()
					ctx, cancel := context.WithTimeout(ctx, g.cfg.ApplyTimeout)
					defer cancel()
					if _, err := g.apply(ctx, command{Op: OpNode, NodeID: g.cfg.NodeID, HTTPAddr: g.cfg.HTTPAddr}); err != nil {
						g.cfg.Logger.Warn("cp: publishing leader address", "err", err)
					}
				}()
			}
		}
	}
}

// Close shuts Raft down and closes the transport and the log. Safe to call
// twice.
func (g *Group) Close() error {
	var err error
	g.once.Do(func() {
		g.stream.stall(false)
		err = g.raft.Shutdown().Error()
		close(g.done)
		g.wg.Wait()
		if e := g.trans.Close(); err == nil {
			err = e
		}
		if e := g.store.Close(); err == nil {
			err = e
		}
	})
	return err
}

// Partition cuts (true) or heals (false) this node's Raft network, for
// fault drills: its Raft connections close and new ones are refused both
// ways; HTTP keeps working.
func (g *Group) Partition(on bool) { g.stream.partition(on) }

// Stall stops (true) or resumes (false) this node's Raft I/O, for fault
// drills: connections stay open but nothing moves, like a stopped process
// (Raft's timers keep running). Close resumes it.
func (g *Group) Stall(on bool) { g.stream.stall(on) }

// Addr is the Raft transport address peers dial.
func (g *Group) Addr() string { return string(g.trans.LocalAddr()) }

// IsLeader reports whether this node currently believes it leads.
func (g *Group) IsLeader() bool { return g.raft.State() == raft.Leader }

// Leader is the leader as this node knows it (all empty when unknown).
func (g *Group) Leader() *NotLeaderError {
	addr, id := g.raft.LeaderWithID()
	if id == "" {
		return &NotLeaderError{}
	}
	return &NotLeaderError{LeaderID: string(id), LeaderRaftAddr: string(addr), LeaderHTTPAddr: g.fsm.nodeHTTP(string(id))}
}

// Revision is the index of the last command this node applied.
func (g *Group) Revision() uint64 { return g.fsm.revision() }

// Snapshot takes a snapshot now (and compacts the log behind it).
func (g *Group) Snapshot() error { return g.raft.Snapshot().Error() }

// Stats is Raft's own status map (state, term, indexes, peers), for the
// admin API.
func (g *Group) Stats() map[string]string { return g.raft.Stats() }

func storeKey(keyspace, key string) string { return keyspace + "/" + key }

// Get reads a key: from the local state when stale, otherwise linearizably
// on the leader (*NotLeaderError on a follower). ErrNotFound when absent.
func (g *Group) Get(ctx context.Context, keyspace, key string, stale bool) (e Entry, err error) {
	defer g.metrics.observe(opGet, time.Now(), &err)
	if !stale {
		if err := g.linearize(ctx); err != nil {
			return Entry{}, err
		}
	}
	e = g.fsm.get(storeKey(keyspace, key))
	if e.Revision == 0 {
		return Entry{}, ErrNotFound
	}
	return e, nil
}

// maxReadIndexScan bounds how far back linearize looks for the last
// command at or before the read index; past it the read takes a Barrier.
const maxReadIndexScan = 256

// linearize makes the next local read linearizable, without writing to the
// log (Raft's read index, §6.4 of Ongaro's thesis):
//
//  1. The leader records its commit index C. Once the leader has committed
//     an entry of its own term, C is at least the index of every entry
//     committed before the read arrived: all earlier terms' committed
//     entries precede its first own-term entry, and its own acknowledged
//     writes were committed (C moved past them) before they were answered.
//     A new leader's commit index may lag until then, so the first read of
//     each term runs a Barrier instead (readBarrier), and records the term.
//  2. VerifyLeader: after the read arrived, a quorum still acknowledged
//     this node as leader, so no other leader can have committed anything
//     in a later term before that point; and the term being unchanged
//     across 1–2 means this node led throughout (a node cannot lead twice
//     in one term).
//  3. Wait until the state machine has applied everything up to C. Only
//     command entries reach the FSM (no-op, barrier and configuration
//     entries do not), so the wait is for the last command at or before
//     C, found in the log (committed entries never change).
//
// The read then sees every write acknowledged before it arrived, and
// nothing that was not committed: the state it reads is C or later.
func (g *Group) linearize(ctx context.Context) error {
	if g.raft.State() != raft.Leader {
		return g.Leader()
	}
	term := g.raft.CurrentTerm()
	if g.readyTerm.Load() != term {
		if err := g.readBarrier(ctx); err != nil {
			return err
		}
		// The Barrier was appended in term or later: if later, this term
		// never matches again, so recording term is always safe.
		for old := g.readyTerm.Load(); old < term && !g.readyTerm.CompareAndSwap(old, term); old = g.readyTerm.Load() {
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout(ctx))
	defer cancel()
	commit := g.raft.CommitIndex()
	if err := wait(ctx, g.raft.VerifyLeader()); err != nil {
		return g.readErr(err)
	}
	if g.raft.CurrentTerm() != term {
		return g.readErr(raft.ErrLeadershipLost)
	}
	target, ok := g.lastCommand(commit)
	if !ok {
		return g.readBarrier(ctx)
	}
	if err := g.fsm.waitApplied(ctx, target); err != nil {
		return g.readErr(err)
	}
	return nil
}

// lastCommand is the index of the last command entry at or before index
// that the FSM has not applied yet (0 when it has applied them all); ok is
// false when the log cannot tell (the caller then falls back to a Barrier).
func (g *Group) lastCommand(index uint64) (uint64, bool) {
	applied := g.fsm.revision()
	var l raft.Log
	for i, n := index, 0; i > applied; i, n = i-1, n+1 {
		if n == maxReadIndexScan {
			return 0, false
		}
		if err := g.store.GetLog(i, &l); err != nil {
			return 0, false
		}
		if l.Type == raft.LogCommand {
			return i, true
		}
	}
	return 0, true
}

// readBarrier makes the next local read linearizable the expensive way:
// the Barrier (a log entry) applies every entry committed before it (so
// before the read arrived), and VerifyLeader checks a quorum still follows
// this node afterwards.
func (g *Group) readBarrier(ctx context.Context) error {
	if g.raft.State() != raft.Leader {
		return g.Leader()
	}
	timeout := g.timeout(ctx)
	if err := wait(ctx, g.raft.Barrier(timeout)); err != nil {
		return g.readErr(err)
	}
	if err := wait(ctx, g.raft.VerifyLeader()); err != nil {
		return g.readErr(err)
	}
	return nil
}

func (g *Group) readErr(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost):
		return g.Leader()
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrClosed
	}
	// A read has no effect, so any other failure is just "not served".
	return fmt.Errorf("%w: %w", &NotLeaderError{}, err)
}

// Put writes a key. With ifRevision set, only if the key's revision equals
// *ifRevision (0: only if absent); otherwise *ConflictError.
// A non-zero lease attaches the key to that lease (ErrLeaseNotFound if it
// does not exist).
func (g *Group) Put(ctx context.Context, keyspace, key string, value []byte, ifRevision *uint64, lease uint64) (_ Entry, err error) {
	op := opPut
	if ifRevision != nil {
		op = opCAS
	}
	defer g.metrics.observe(op, time.Now(), &err)
	res, err := g.apply(ctx, command{Op: OpPut, Key: storeKey(keyspace, key), Value: value, IfRevision: ifRevision, Lease: lease})
	if err != nil {
		return Entry{}, err
	}
	return res.Entry, res.Err
}

// Delete removes a key, conditionally like Put; ErrNotFound when absent.
// It returns the revision the delete was applied at.
func (g *Group) Delete(ctx context.Context, keyspace, key string, ifRevision *uint64) (_ uint64, err error) {
	defer g.metrics.observe(opDelete, time.Now(), &err)
	res, err := g.apply(ctx, command{Op: OpDelete, Key: storeKey(keyspace, key), IfRevision: ifRevision})
	if err != nil {
		return 0, err
	}
	if res.Err != nil {
		return res.Entry.Revision, res.Err
	}
	return res.Revision, nil
}

// apply proposes a command on the leader and waits for it to be applied.
// Errors: *NotLeaderError (not proposed), ErrUnknownOutcome (proposed, fate
// unknown), ErrClosed.
func (g *Group) apply(ctx context.Context, c command) (applyResult, error) {
	if g.raft.State() != raft.Leader {
		return applyResult{}, g.Leader()
	}
	b, err := json.Marshal(c)
	if err != nil {
		return applyResult{}, fmt.Errorf("cp: encode command: %w", err)
	}
	f := g.raft.Apply(b, g.timeout(ctx))
	if err := wait(ctx, f); err != nil {
		switch {
		case errors.Is(err, raft.ErrNotLeader):
			// Rejected before it reached the log.
			return applyResult{}, g.Leader()
		case errors.Is(err, raft.ErrRaftShutdown):
			return applyResult{}, fmt.Errorf("%w: %w", ErrUnknownOutcome, ErrClosed)
		}
		return applyResult{}, fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
	}
	res, ok := f.Response().(applyResult)
	if !ok {
		return applyResult{}, fmt.Errorf("cp: unexpected apply response %T", f.Response())
	}
	return res, nil
}

func (g *Group) timeout(ctx context.Context) time.Duration {
	t := g.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d < t {
			t = max(d, time.Millisecond)
		}
	}
	return t
}

// wait waits for a Raft future or the context, whichever ends first. Raft
// keeps working on the future after ctx ends; the caller only stops waiting.
func wait(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// slogWriter forwards hashicorp/raft's log lines to slog.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	switch {
	case strings.Contains(line, "[ERROR]"):
		level = slog.LevelError
	case strings.Contains(line, "[WARN]"):
		level = slog.LevelWarn
	case strings.Contains(line, "[DEBUG]"), strings.Contains(line, "[TRACE]"):
		level = slog.LevelDebug
	}
	w.l.Log(context.Background(), level, line)
	return len(p), nil
}

var _ io.Writer = slogWriter{}
