// Package failover detects failed nodes of a cache cluster and promotes
// replicas, with the slot map in kvnode's consensus tier (package
// topology) as the only arbiter.
//
// # Failure reports
//
// Every node runs a Monitor. Every Interval it probes every other node of
// the map (a RESP PING to its client address; any reply is alive) and
// publishes what it sees as a small JSON report under
// "<cluster>/health/<node>" in the same CP keyspace as the topology:
//
//	{"node":"b","epoch":7,"at":1764500000123,"seq":42,
//	 "down":{"a":1764499997000},"down_ms":{"a":3123},"up":["c","a1"],
//	 "repl_offset":0}
//
// at is the reporter's wall clock (unix ms), seq grows with every report of
// one run, down maps a node to when the reporter first failed to reach it
// (wall clock, for people), down_ms to how long it has been unreachable
// continuously as of the report by the reporter's monotonic clock (what the
// decision uses), up lists the nodes it reaches, repl_offset is the
// reporter's replication offset (replicas). A node publishes when the set
// of nodes it finds down, or the set it finds down for at least FailAfter,
// or its map's epoch changes, and otherwise as a heartbeat every Heartbeat
// (1 s): 1 Raft write per node per second in a steady cluster. Monitors
// follow the reports with a watch of the "health/" prefix. A report counts
// while it is fresh: received (a new revision of the key, by the reader's
// monotonic clock) within 3 × Interval + Heartbeat, and, to ignore a
// backlog a lagging watch replays, stamped (at) no earlier than that window
// plus MaxClockSkew before the reader's wall clock.
//
// # Decisions
//
// Voters are the primaries owning slots in the stored map (its Quorum() is
// a majority of them). A node X is down by quorum when at least Quorum()
// voters other than X have a fresh report saying X has been unreachable for
// at least FailAfter. One node's view never decides: with 3 primaries the
// quorum is 2, so both surviving primaries must report the third. A monitor
// probes again the moment a peer it found down reaches FailAfter (so its
// report says so then, not a round later) and decides whenever a report
// arrives: a promotion is published about FailAfter plus the first failed
// probe's delay (≤ Interval) after a primary dies (measured: 3.05 s with
// the defaults, 1.6–1.8 s with FailAfter 1.5 s and Interval 200 ms).
//
//   - Promotion. Each replica of a primary P owning slots decides on its
//     own: when P is down by quorum, the candidate is the replica of P that
//     is not failed, has a fresh report of its own (it is alive and talks to
//     the store) and is not down by quorum, with the highest repl_offset
//     (ties: the lowest id). Only the candidate publishes: the stored map
//     with epoch + 1, P's slots moved to the candidate (now a primary), P
//     replica_of the candidate with failed: true, P's other replicas
//     re-pointed to the candidate, and migrations from or to P dropped.
//   - Failed flags. The lowest-id live primary (owning slots, not failed,
//     fresh report, not down by quorum) marks failed: true on a node down by quorum that has no
//     promotion to wait for (a replica, a primary without slots, or a
//     primary with no eligible replica), and clears it on a failed node that
//     a quorum of voters reports up again. Its changes of one round go into
//     one publication.
//
// Every publication is a compare-and-set (topology.Client.Publish) of a map
// derived from the last stored map the monitor read (or published), at
// that revision, raising the epoch by one. A conflict means another writer changed the map: the
// monitor reads it again and decides again from scratch (never a blind
// retry), so two replicas deciding at once publish exactly one promotion.
// History and CheckHistory read the topology key's whole history back (as
// the tests do) to check that epochs only rise and that every map has one
// owner per slot.
//
// # Write fencing, and why a failover loses milliseconds, not seconds
//
// Before every write in cluster mode the node asks WriteFence (command
// Config.WriteFence). A primary refuses writes with
// "CLUSTERDOWN The cluster topology could not be confirmed for <d>; writes
// are refused" when its last confirmation is older than Lease. A
// confirmation is a linearizable read of the stored map (one per Interval,
// through the Raft leader, in a loop of its own so slow probes or
// publications never delay it) that still lists the node as a primary, and
// it is dated at the read's start, never its end, because the read's
// linearization point lies between the two. A read that shows the node
// demoted fences it at once, before its Syncer installs that map. Until
// its first confirmation a primary refuses writes: call Confirm before
// serving.
//
// The lease ties writes to the store's availability: a store without a
// Raft leader for longer than Lease fences every primary. Measured with
// the defaults (kvnode's 1 s election timeout), killing the kvnode leader
// left the primaries refusing writes for 0–65 ms; with a 1 s lease, ~0.9 s.
// Raise FailAfter and Lease together where that matters more than
// detection time.
//
// Timeline of a primary P cut off from everything at t (all durations on
// each machine's monotonic clock):
//
//   - P's last confirming read started before t (a later one cannot reach the
//     store), so P refuses writes from t + Lease at the latest.
//   - Voters can only find P unreachable from t on (a probe before t
//     succeeded), so no quorum of reports can say "down for FailAfter"
//     before t + FailAfter, and a promotion is published after that.
//   - Lease < FailAfter (New refuses otherwise): P has stopped writing
//     FailAfter − Lease (1 s by default) before any replica can be promoted.
//     That margin must cover the clocks' rate difference over FailAfter and
//     the time a write already past the fence takes to apply: both are
//     micro- to milliseconds with NTP-disciplined clocks (drift ≤ 500 ppm is
//     1.5 ms over 3 s). Wall clocks are never compared for this; only the
//     freshness filter above uses them, with MaxClockSkew of tolerance.
//
// A partition that is not total is the harder case: P still reaches the
// store but its peers cannot reach P (or clients can reach P but no voter
// can). P's reads keep confirming it until the promotion is stored, and P
// learns of it at its next read, up to Interval later. To close that
// window the promoted replica refuses writes itself for PromotionHold
// (default Lease × 1.1) after it published its promotion: any read of P
// that confirmed P started before the promotion was stored, so P's lease
// from it ends within Lease of that, before the new primary takes a write.
// With the hold there is never a moment when two nodes accept writes for
// one slot (under the bounded clock rate assumption), at the cost of
// PromotionHold more write unavailability for the failed slots
// (PromotionHold < 0 disables it and accepts up to Interval of writes to
// the old primary being lost in such a partition).
//
// What a failover does lose, as documented: replication is asynchronous,
// so the writes P acknowledged that had not reached the promoted replica
// when P died — the last few milliseconds of writes.
//
// A process stopped as a whole (SIGSTOP, a VM pause) after a write passed
// the fence check and resumed after a failover can still apply that one
// write; the fence is a lease, not a consensus round per write.
//
// # Limits
//
// Every monitor follows every report: with N nodes the store writes about N
// reports a second and streams N² events a second. Fine for tens of nodes;
// at hundreds, replicas should follow only their primaries' voters (not
// done). Reports of nodes removed from the map stay in the store (they
// no longer count, their node being unknown).
//
// # Demotion
//
// A returning old primary loads the newer map (its Syncer), in which it is
// a replica of the promoted node: routing refuses its writes (READONLY,
// MOVED) and Role names the node to follow. Its monitor's next read fences
// writes even before the Syncer installs the map.
package failover

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/topology"
)

// Defaults.
const (
	DefaultInterval     = 500 * time.Millisecond
	DefaultFailAfter    = 3 * time.Second
	DefaultLease        = 2 * time.Second
	DefaultHeartbeat    = time.Second
	DefaultMaxClockSkew = time.Second
)

// HealthPrefix is where reports live, under "<cluster>/".
const HealthPrefix = "health/"

// Config configures a Monitor.
type Config struct {
	// Client is the cluster's topology store.
	Client *topology.Client
	// State is this node's current map (installed by topology.Syncer).
	State  *cluster.State
	SelfID string
	// Probe checks a peer's RESP address (default: a Pinger with TLS).
	Probe func(ctx context.Context, addr string) error
	// TLS is the default probe's configuration for peers whose RESP port
	// speaks TLS (see Pinger.TLS); nil: plaintext.
	TLS *tls.Config
	// ProbeTimeout bounds one probe (default min(Interval, 1 s)).
	ProbeTimeout time.Duration
	// Interval is the probe, confirm and decide period (default 500 ms).
	Interval time.Duration
	// FailAfter is how long a quorum must report a node unreachable,
	// continuously, before it is failed over (default 3 s).
	FailAfter time.Duration
	// Lease: a primary refuses writes when its role was not confirmed by
	// the store for this long (default 2 s); Interval < Lease < FailAfter.
	Lease time.Duration
	// PromotionHold: a node that promoted itself refuses writes this long
	// after its publication (default Lease × 1.1; at least Lease; < 0:
	// none). See the package comment.
	PromotionHold time.Duration
	// Heartbeat is the period of unchanged reports (default 1 s).
	Heartbeat time.Duration
	// MaxClockSkew is the wall-clock difference between nodes tolerated
	// when judging a report's age (default 1 s).
	MaxClockSkew time.Duration
	// ReplOffset is this node's replication offset (replicas); it elects
	// the most up-to-date replica. Default: 0.
	ReplOffset func() int64
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// OnPublish, when set, is called after this monitor published a map
	// (a test signal).
	OnPublish func(epoch uint64, why string)
	// OnPass, when set, is called after every round (probe, report,
	// decide) with what the round saw and did: the signal a test waits for
	// before asserting that nothing happened ("three rounds counted these
	// reports and published nothing"). It runs on the Monitor's goroutine
	// and must not block. Nil in production.
	OnPass func(Pass)
}

// Pass is what one round of a Monitor saw and did (Config.OnPass).
type Pass struct {
	// Epoch is the epoch of the stored map the round decided on; 0: no
	// map read yet, so nothing was decided.
	Epoch uint64
	// Reports are the fresh reports the decision counted, by reporter,
	// this node's own (with its probes' findings) included; nil when
	// nothing was decided.
	Reports map[string]Report
	// Published is the epoch of the map the round published; 0: none.
	Published uint64
}

// Report is one node's published view.
type Report struct {
	Node  string `json:"node"`
	Epoch uint64 `json:"epoch"`
	// At is the reporter's wall clock (unix ms) when it made the report.
	At  int64  `json:"at"`
	Seq uint64 `json:"seq"`
	// Down: unreachable nodes, since when (unix ms, reporter's clock).
	Down map[string]int64 `json:"down,omitempty"`
	// DownMS: how long each has been unreachable, continuously, as of At
	// (ms, the reporter's monotonic clock).
	DownMS map[string]int64 `json:"down_ms,omitempty"`
	// Up: the nodes the reporter reaches.
	Up         []string `json:"up,omitempty"`
	ReplOffset int64    `json:"repl_offset"`
}

// Monitor probes the cluster, publishes this node's reports, promotes this
// node or flags others when the reports agree, and fences this node's
// writes.
type Monitor struct {
	cfg    Config
	log    *slog.Logger
	pinger *Pinger   // the default probe's, closed when Run ends
	base   time.Time // monotonic origin
	stale  time.Duration

	// Fence state, read on every write.
	lastConfirm atomic.Int64  // mono ns of the last confirming read's start; -1 none
	demoted     atomic.Uint64 // epoch of the last stored map read that does not make this node a primary; 0 none
	holdUntil   atomic.Int64  // mono ns

	kick chan struct{} // a report arrived

	mu       sync.Mutex
	reports  map[string]received // by node id, from the watch
	health   map[string]*peer    // this node's probes, by node id
	own      Report
	seq      uint64
	lastKey  string
	lastPub  time.Duration // mono of the last published report
	stored   *topology.Topology
	decision string // last logged decision

	peerUp     *prometheus.GaugeVec
	published  prometheus.Counter
	promotions prometheus.Counter
	conflicts  prometheus.Counter
	pubs       *prometheus.CounterVec
	fenceGauge prometheus.GaugeFunc
}

type received struct {
	r   Report
	rev uint64
	at  time.Duration // mono
}

type peer struct {
	up        bool
	probed    bool
	downSince time.Duration // mono
	downWall  time.Time
}

// New validates cfg and returns a Monitor; Run starts it.
func New(cfg Config) (*Monitor, error) {
	if cfg.Client == nil || cfg.State == nil || cfg.SelfID == "" {
		return nil, errors.New("failover: Client, State and SelfID are required")
	}
	if err := cfg.Client.Validate(); err != nil {
		return nil, err
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.FailAfter <= 0 {
		cfg.FailAfter = DefaultFailAfter
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Lease >= cfg.FailAfter {
		return nil, fmt.Errorf("failover: lease %s must be shorter than fail-after %s, so a cut-off primary stops writing before its replica can be promoted", cfg.Lease, cfg.FailAfter)
	}
	if cfg.Lease <= cfg.Interval {
		return nil, fmt.Errorf("failover: lease %s must be longer than the interval %s that renews it", cfg.Lease, cfg.Interval)
	}
	switch {
	case cfg.PromotionHold == 0:
		cfg.PromotionHold = cfg.Lease + cfg.Lease/10
	case cfg.PromotionHold > 0 && cfg.PromotionHold < cfg.Lease:
		return nil, fmt.Errorf("failover: promotion hold %s must outlast the lease %s (or be negative: no hold)", cfg.PromotionHold, cfg.Lease)
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.MaxClockSkew <= 0 {
		cfg.MaxClockSkew = DefaultMaxClockSkew
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = min(cfg.Interval, time.Second)
	}
	var pinger *Pinger
	if cfg.Probe == nil {
		pinger = &Pinger{TLS: cfg.TLS}
		cfg.Probe = pinger.Probe
	}
	m := &Monitor{cfg: cfg, log: cfg.Logger, base: time.Now(), pinger: pinger,
		stale:   3*cfg.Interval + cfg.Heartbeat,
		reports: map[string]received{}, health: map[string]*peer{}, kick: make(chan struct{}, 1),
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	m.log = m.log.With("component", "failover", "node", cfg.SelfID)
	m.lastConfirm.Store(-1)
	m.peerUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "portico_cachenode_failover_peer_up",
		Help: "1 when this node's last probe of the peer was answered, else 0."}, []string{"peer"})
	m.published = prometheus.NewCounter(prometheus.CounterOpts{Name: "portico_cachenode_failover_reports_published_total",
		Help: "Failure reports this node wrote to the topology store."})
	m.promotions = prometheus.NewCounter(prometheus.CounterOpts{Name: "portico_cachenode_failover_promotions_total",
		Help: "Maps published by this node promoting itself to primary."})
	m.conflicts = prometheus.NewCounter(prometheus.CounterOpts{Name: "portico_cachenode_failover_publish_conflicts_total",
		Help: "Map publications refused because another writer changed the map first."})
	m.pubs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portico_cachenode_failover_publications_total",
		Help: "Maps this node published, by kind (promote, flags)."}, []string{"kind"})
	m.fenceGauge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "portico_cachenode_failover_write_fence_active",
		Help: "1 while this node refuses writes (lease expired, demoted, or just promoted)."}, func() float64 {
		if m.WriteFence() != "" {
			return 1
		}
		return 0
	})
	if r := cfg.Registerer; r != nil {
		for _, c := range []prometheus.Collector{m.peerUp, m.published, m.promotions, m.conflicts, m.pubs, m.fenceGauge} {
			if err := r.Register(c); err != nil {
				return nil, fmt.Errorf("failover: metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *Monitor) mono() time.Duration { return time.Since(m.base) }

// Run probes, reports, confirms and decides every Interval until ctx ends.
func (m *Monitor) Run(ctx context.Context) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = m.cfg.Client.WatchPrefix(wctx, HealthPrefix, 0, m.onReport, topology.WatchHooks{
			Disconnected: func(addr string, err error) {
				m.log.Warn("failure report watch broken; reconnecting", "addr", addr, "err", err)
			},
		})
	})
	// The lease's reads run on their own, so slow probes or publications
	// never delay a renewal.
	wg.Go(func() {
		for {
			start := m.mono()
			m.confirm(wctx)
			select {
			case <-wctx.Done():
				return
			case <-time.After(max(0, start+m.cfg.Interval-m.mono())):
			}
		}
	})
	defer wg.Wait()
	defer cancel()
	if m.pinger != nil {
		defer m.pinger.Close()
	}
	for {
		start := m.mono()
		p := m.tick(ctx)
		if m.cfg.OnPass != nil {
			m.cfg.OnPass(p)
		}
		// The next round: after Interval, or when a peer found down will
		// have been down for FailAfter (its report then says so at once).
		next := start + m.cfg.Interval
		if c := m.nextCrossing(); c > m.mono() && c < next {
			next = c
		}
		timer := time.NewTimer(max(0, next-m.mono()))
	wait:
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		case <-m.kick:
			m.react(ctx)
			goto wait
		}
	}
}

// nextCrossing is the earliest moment a peer found down will have been
// down for FailAfter, or 0.
func (m *Monitor) nextCrossing() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var next time.Duration
	now := m.mono()
	for _, p := range m.health {
		if c := p.downSince + m.cfg.FailAfter; p.probed && !p.up && c > now && (next == 0 || c < next) {
			next = c
		}
	}
	return next
}

// react decides on a new report without waiting for the next round: a
// replica promotes itself as soon as the last report needed arrives.
func (m *Monitor) react(ctx context.Context) {
	m.mu.Lock()
	t := m.stored
	m.mu.Unlock()
	if t != nil {
		m.act(ctx, t)
	}
}

func (m *Monitor) onReport(e topology.Entry) error {
	id := strings.TrimPrefix(e.Name, HealthPrefix)
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.Deleted {
		delete(m.reports, id)
		return nil
	}
	var r Report
	if err := json.Unmarshal(e.Value, &r); err != nil || r.Node != id {
		m.log.Warn("malformed failure report ignored", "key", e.Name, "err", err)
		return nil
	}
	if old, ok := m.reports[id]; ok && old.rev >= e.Revision {
		return nil
	}
	m.reports[id] = received{r: r, rev: e.Revision, at: m.mono()}
	select {
	case m.kick <- struct{}{}:
	default:
	}
	return nil
}

// tick is one round: probe, report, decide on the last map read (a
// publication is a compare-and-set on its revision, so a map changed since
// is a conflict, never an overwrite).
func (m *Monitor) tick(ctx context.Context) Pass {
	m.mu.Lock()
	t := m.stored
	m.mu.Unlock()
	mp := m.cfg.State.Load()
	if t != nil {
		if sm, err := t.Spec.Map(m.cfg.SelfID); err == nil {
			mp = sm
		}
	}
	if mp == nil {
		return Pass{}
	}
	m.probeAll(ctx, mp)
	m.report(ctx, mp)
	if t == nil {
		return Pass{}
	}
	return m.act(ctx, t)
}

// Confirm reads the stored map once, as Run does every Interval: a map
// listing this node as a primary renews its write lease (until the first
// such read a primary refuses writes; call Confirm before serving to not
// wait for Run's first round). It returns the read's error.
func (m *Monitor) Confirm(ctx context.Context) error {
	_, err := m.confirmRead(ctx)
	return err
}

func (m *Monitor) confirm(ctx context.Context) *topology.Topology {
	t, err := m.confirmRead(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Debug("topology read failed", "err", err)
		}
		return nil
	}
	return t
}

// confirmRead reads the stored map; a map listing this node as a primary
// renews the write lease from the read's start (the read linearizes after
// it), one that does not fences writes at once.
func (m *Monitor) confirmRead(ctx context.Context) (*topology.Topology, error) {
	start := m.mono()
	rctx, cancel := context.WithTimeout(ctx, m.cfg.Interval)
	t, err := m.cfg.Client.Load(rctx)
	cancel()
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stored != nil && t.Revision < m.stored.Revision {
		return m.stored, nil // an overlapping read saw a later map
	}
	m.stored = t
	me := (*cluster.NodeSpec)(nil)
	for i := range t.Spec.Nodes {
		if t.Spec.Nodes[i].ID == m.cfg.SelfID {
			me = &t.Spec.Nodes[i]
		}
	}
	if me != nil && me.ReplicaOf == "" {
		if int64(start) > m.lastConfirm.Load() {
			m.lastConfirm.Store(int64(start))
		}
		if m.demoted.Swap(0) != 0 {
			m.log.Info("stored topology lists this node as a primary again", "epoch", t.Spec.Epoch)
		}
	} else if m.demoted.Swap(t.Spec.Epoch) != t.Spec.Epoch {
		m.log.Warn("stored topology no longer makes this node a primary; fencing writes", "epoch", t.Spec.Epoch, "listed", me != nil)
	}
	return t, nil
}

func (m *Monitor) probeAll(ctx context.Context, mp *cluster.Map) {
	type result struct {
		id  string
		err error
	}
	var targets []*cluster.Node
	for i := range mp.Nodes {
		if mp.Nodes[i].ID != m.cfg.SelfID {
			targets = append(targets, &mp.Nodes[i])
		}
	}
	out := make(chan result, len(targets))
	for _, n := range targets {
		go func() {
			pctx, cancel := context.WithTimeout(ctx, m.cfg.ProbeTimeout)
			defer cancel()
			out <- result{n.ID, m.cfg.Probe(pctx, n.Addr())}
		}()
	}
	res := map[string]error{}
	for range targets {
		r := <-out
		res[r.id] = r.err
	}
	now, wall := m.mono(), time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for id := range m.health {
		if _, ok := res[id]; !ok {
			delete(m.health, id)
			m.peerUp.DeleteLabelValues(id)
		}
	}
	for id, err := range res {
		p := m.health[id]
		if p == nil {
			p = &peer{}
			m.health[id] = p
		}
		was, probed := p.up, p.probed
		p.probed = true
		if err == nil {
			p.up = true
			m.peerUp.WithLabelValues(id).Set(1)
			if probed && !was {
				m.log.Info("peer reachable again", "peer", id, "was_down", (now - p.downSince).Round(time.Millisecond))
			}
			continue
		}
		m.peerUp.WithLabelValues(id).Set(0)
		if !probed || was {
			p.up = false
			p.downSince, p.downWall = now, wall
			m.log.Info("peer unreachable", "peer", id, "err", err)
		}
	}
}

// report publishes this node's view when it changed, or as a heartbeat.
func (m *Monitor) report(ctx context.Context, mp *cluster.Map) {
	now := m.mono()
	m.mu.Lock()
	r := Report{Node: m.cfg.SelfID, Epoch: mp.Epoch, At: time.Now().UnixMilli()}
	if m.cfg.ReplOffset != nil {
		r.ReplOffset = m.cfg.ReplOffset()
	}
	var down, failing []string
	for id, p := range m.health {
		if !p.probed {
			continue
		}
		if p.up {
			r.Up = append(r.Up, id)
			continue
		}
		if r.Down == nil {
			r.Down, r.DownMS = map[string]int64{}, map[string]int64{}
		}
		d := now - p.downSince
		r.Down[id] = p.downWall.UnixMilli()
		r.DownMS[id] = d.Milliseconds()
		down = append(down, id)
		if d >= m.cfg.FailAfter {
			failing = append(failing, id)
		}
	}
	sort.Strings(r.Up)
	sort.Strings(down)
	sort.Strings(failing)
	key := fmt.Sprint(mp.Epoch, down, failing, r.Up)
	due := key != m.lastKey || m.lastPub == 0 || now-m.lastPub >= m.cfg.Heartbeat
	if due {
		m.seq++
		r.Seq = m.seq
	}
	// The node's own view is always current in its decisions.
	m.own = r
	m.mu.Unlock()
	if !due {
		return
	}
	raw, err := json.Marshal(r)
	if err != nil {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, m.cfg.Interval)
	_, err = m.cfg.Client.Put(pctx, HealthPrefix+m.cfg.SelfID, raw)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("failure report not published", "err", err)
		}
		return
	}
	m.published.Inc()
	m.mu.Lock()
	if key != m.lastKey {
		m.log.Debug("failure report published", "epoch", r.Epoch, "down", down, "failing", failing)
	}
	m.lastKey, m.lastPub = key, now
	m.mu.Unlock()
}

// fresh returns the reports that count now, this node's own included.
func (m *Monitor) fresh() map[string]Report {
	now, wall := m.mono(), time.Now().UnixMilli()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]Report{}
	for id, rc := range m.reports {
		if now-rc.at > m.stale || wall-rc.r.At > (m.stale+m.cfg.MaxClockSkew).Milliseconds() {
			continue
		}
		out[id] = rc.r
	}
	if m.own.Node != "" {
		out[m.cfg.SelfID] = m.own
	}
	return out
}

// view is one decision's inputs.
type view struct {
	m         *cluster.Map
	reports   map[string]Report
	failAfter int64 // ms
}

func (v view) voters() []*cluster.Node {
	var out []*cluster.Node
	for i := range v.m.Nodes {
		if len(v.m.Nodes[i].Ranges) > 0 {
			out = append(out, &v.m.Nodes[i])
		}
	}
	return out
}

// downVotes lists the voters (other than id) whose fresh report has id
// unreachable for FailAfter, with how long.
func (v view) downVotes(id string) map[string]int64 {
	out := map[string]int64{}
	for _, n := range v.voters() {
		if n.ID == id {
			continue
		}
		if r, ok := v.reports[n.ID]; ok && r.DownMS[id] >= v.failAfter {
			out[n.ID] = r.DownMS[id]
		}
	}
	return out
}

func (v view) upVotes(id string) []string {
	var out []string
	for _, n := range v.voters() {
		if n.ID == id {
			continue
		}
		if r, ok := v.reports[n.ID]; ok && slices.Contains(r.Up, id) {
			out = append(out, n.ID)
		}
	}
	return out
}

func (v view) downByQuorum(id string) bool { return len(v.downVotes(id)) >= v.m.Quorum() }

// candidates are p's replicas that may take over, best first.
func (v view) candidates(p *cluster.Node) []Report {
	var out []Report
	for _, ri := range p.Replicas {
		r := &v.m.Nodes[ri]
		rep, ok := v.reports[r.ID]
		if r.Failed || !ok || v.downByQuorum(r.ID) {
			continue
		}
		out = append(out, rep)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ReplOffset != out[j].ReplOffset {
			return out[i].ReplOffset > out[j].ReplOffset
		}
		return out[i].Node < out[j].Node
	})
	return out
}

// action is a map to publish.
type action struct {
	spec    cluster.Spec
	kind    string // "promote" or "flags"
	why     string
	attrs   []any
	promote bool
}

// decide returns what this node should publish given the stored map t,
// or nil.
func (m *Monitor) decide(t *topology.Topology, reports map[string]Report) *action {
	mp, err := t.Spec.Map(m.cfg.SelfID)
	if err != nil {
		return nil
	}
	v := view{m: mp, reports: reports, failAfter: m.cfg.FailAfter.Milliseconds()}
	me := mp.Myself()
	q := mp.Quorum()
	if me.IsReplica() {
		if me.Failed {
			return nil
		}
		p := &mp.Nodes[me.ReplicaOf]
		if len(p.Ranges) == 0 {
			return nil
		}
		votes := v.downVotes(p.ID)
		if len(votes) < q {
			return nil
		}
		cands := v.candidates(p)
		var ids []string
		offsets := map[string]int64{}
		for _, c := range cands {
			ids = append(ids, c.Node)
			offsets[c.Node] = c.ReplOffset
		}
		if len(cands) == 0 || cands[0].Node != me.ID {
			m.note(fmt.Sprint("wait ", p.ID, ids), "primary failed by quorum; another replica is the candidate",
				"primary", p.ID, "reports_down_ms", votes, "quorum", q, "candidates", ids, "offsets", offsets)
			return nil
		}
		return &action{spec: promoteSpec(t.Spec, p.ID, me.ID), kind: "promote", promote: true,
			why:   fmt.Sprintf("promote %s over failed %s", me.ID, p.ID),
			attrs: []any{"failed_primary", p.ID, "reports_down_ms", votes, "quorum", q, "candidates", ids, "offsets", offsets}}
	}
	// Flags are set by the lowest-id live primary.
	if len(me.Ranges) == 0 || me.Failed {
		return nil
	}
	for _, n := range v.voters() {
		if _, ok := reports[n.ID]; ok && !n.Failed && !v.downByQuorum(n.ID) {
			if n.ID != me.ID {
				return nil // a live primary with a lower id
			}
			break
		}
	}
	set, clear := map[string]bool{}, map[string]bool{}
	var attrs []any
	for i := range mp.Nodes {
		n := &mp.Nodes[i]
		if n.ID == me.ID {
			continue
		}
		switch {
		case !n.Failed && v.downByQuorum(n.ID) && (len(n.Ranges) == 0 || len(v.candidates(n)) == 0):
			set[n.ID] = true
			attrs = append(attrs, "failed_"+n.ID, v.downVotes(n.ID))
		case n.Failed && len(v.upVotes(n.ID)) >= q:
			clear[n.ID] = true
			attrs = append(attrs, "recovered_"+n.ID, v.upVotes(n.ID))
		}
	}
	if len(set) == 0 && len(clear) == 0 {
		return nil
	}
	s := copySpec(t.Spec)
	s.Epoch++
	for i := range s.Nodes {
		switch {
		case set[s.Nodes[i].ID]:
			s.Nodes[i].Failed = true
		case clear[s.Nodes[i].ID]:
			s.Nodes[i].Failed = false
		}
	}
	why := fmt.Sprintf("failed %v, recovered %v", slices.Sorted(maps.Keys(set)), slices.Sorted(maps.Keys(clear)))
	return &action{spec: s, kind: "flags", why: why, attrs: append(attrs, "quorum", q)}
}

// note logs a waiting decision once.
func (m *Monitor) note(key, msg string, attrs ...any) {
	m.mu.Lock()
	same := m.decision == key
	m.decision = key
	m.mu.Unlock()
	if !same {
		m.log.Info(msg, attrs...)
	}
}

func copySpec(s cluster.Spec) cluster.Spec {
	s.Myself = ""
	s.Nodes = slices.Clone(s.Nodes)
	for i := range s.Nodes {
		s.Nodes[i].Slots = slices.Clone(s.Nodes[i].Slots)
	}
	s.Migrations = slices.Clone(s.Migrations)
	return s
}

// promoteSpec is s with epoch + 1 and replica newID taking failed's slots.
func promoteSpec(s cluster.Spec, failed, newID string) cluster.Spec {
	return Promote(s, failed, newID, true)
}

// act publishes what decide asks for; on a conflict it reads the map again
// and decides again (at most three rounds per tick). It returns what its
// last decision saw and published.
func (m *Monitor) act(ctx context.Context, t *topology.Topology) (p Pass) {
	for round := 0; round < 3; round++ {
		p = Pass{Epoch: t.Spec.Epoch, Reports: m.fresh()}
		a := m.decide(t, p.Reports)
		if a == nil {
			return p
		}
		m.log.Info("publishing map: "+a.why, append([]any{"epoch", a.spec.Epoch, "revision", t.Revision}, a.attrs...)...)
		pctx, cancel := context.WithTimeout(ctx, 2*m.cfg.Interval+time.Second)
		rev, err := m.cfg.Client.Publish(pctx, a.spec, t.Revision)
		cancel()
		conflict := errors.Is(err, topology.ErrConflict) || errors.Is(err, topology.ErrEpoch)
		if a.promote && !conflict && m.cfg.PromotionHold > 0 {
			// Also after an unknown outcome: the map may be stored.
			m.holdUntil.Store(int64(m.mono() + m.cfg.PromotionHold))
		}
		switch {
		case err == nil:
			m.mu.Lock()
			if m.stored == nil || m.stored.Revision < rev {
				// Decide on our own map from now on, not the one it replaced.
				m.stored = &topology.Topology{Revision: rev, Spec: a.spec}
			}
			m.mu.Unlock()
			m.pubs.WithLabelValues(a.kind).Inc()
			if a.promote {
				m.promotions.Inc()
			}
			m.log.Info("map published: "+a.why, "epoch", a.spec.Epoch)
			if m.cfg.OnPublish != nil {
				m.cfg.OnPublish(a.spec.Epoch, a.why)
			}
			p.Published = a.spec.Epoch
			return p
		case conflict:
			m.conflicts.Inc()
			m.log.Info("map changed by another writer; reading it again to decide again", "err", err)
			if t, err = m.confirmRead(ctx); err != nil {
				return p
			}
		default:
			if ctx.Err() == nil {
				m.log.Warn("map publication failed; deciding again next interval", "err", err)
			}
			return p
		}
	}
	return p
}

// WriteFence is command.Config.WriteFence: "" while this node may take
// writes, else the error reply (without '-'). Only a primary (in State) is
// fenced: routing already refuses writes on replicas. Cheap: atomic loads
// and one monotonic clock reading.
func (m *Monitor) WriteFence() string {
	mp := m.cfg.State.Load()
	if mp == nil || mp.Myself().IsReplica() {
		return ""
	}
	if e := m.demoted.Load(); e != 0 && e >= mp.Epoch {
		return fmt.Sprintf("CLUSTERDOWN The stored topology (epoch %d) no longer makes this node a primary; writes are refused", e)
	}
	now := m.mono()
	if h := time.Duration(m.holdUntil.Load()); now < h {
		return fmt.Sprintf("CLUSTERDOWN This node was just promoted; writes resume in %s, once the old primary's lease has run out", (h - now).Round(time.Millisecond))
	}
	lc := m.lastConfirm.Load()
	if lc < 0 {
		return "CLUSTERDOWN The cluster topology has not been confirmed yet; writes are refused"
	}
	if age := now - time.Duration(lc); age > m.cfg.Lease {
		return fmt.Sprintf("CLUSTERDOWN The cluster topology could not be confirmed for %s; writes are refused", age.Round(time.Millisecond))
	}
	return ""
}

// Status is what a monitor reports about itself.
type Status struct {
	// Epoch and Revision of the stored map last read.
	Epoch    uint64
	Revision uint64
	// LastConfirm is when the last read confirming this node as a primary
	// started (zero: none).
	LastConfirm time.Time
	// Fence is WriteFence's answer.
	Fence string
	// Down: peers this node cannot reach, and for how long.
	Down map[string]time.Duration
	// Reports: the fresh reports this node counts, by reporter.
	Reports map[string]Report
}

// Status reports the monitor's view; safe for concurrent use.
func (m *Monitor) Status() Status {
	st := Status{Fence: m.WriteFence(), Reports: m.fresh(), Down: map[string]time.Duration{}}
	if lc := m.lastConfirm.Load(); lc >= 0 {
		st.LastConfirm = m.base.Add(time.Duration(lc))
	}
	now := m.mono()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stored != nil {
		st.Epoch, st.Revision = m.stored.Spec.Epoch, m.stored.Revision
	}
	for id, p := range m.health {
		if p.probed && !p.up {
			st.Down[id] = now - p.downSince
		}
	}
	return st
}

// Role says what the map makes this node: a primary, or a replica that
// should replicate from follow (connect to follow.BusAddr()).
func Role(m *cluster.Map) (primary bool, follow *cluster.Node) {
	me := m.Myself()
	if !me.IsReplica() {
		return true, nil
	}
	return false, &m.Nodes[me.ReplicaOf]
}
