package failover

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/internal/kvtest"
	"github.com/portico-io/portico/cachenode/topology"
)

const (
	testInterval  = 200 * time.Millisecond
	testFailAfter = 1500 * time.Millisecond
	testLease     = time.Second
)

// fakePeer stands for a cache node's RESP listener: it answers every
// command with +PONG until killed.
type fakePeer struct {
	addr  string
	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
}

func newFakePeer(t *testing.T) *fakePeer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &fakePeer{addr: ln.Addr().String(), conns: map[net.Conn]bool{}}
	p.serve(ln)
	t.Cleanup(p.kill)
	return p
}

func (p *fakePeer) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns[c] = true
			p.mu.Unlock()
			go func() {
				r := bufio.NewReader(c)
				for {
					// One PING is "*1\r\n$4\r\nPING\r\n": three lines.
					for range 3 {
						if _, err := r.ReadString('\n'); err != nil {
							c.Close()
							return
						}
					}
					if _, err := c.Write([]byte("+PONG\r\n")); err != nil {
						return
					}
				}
			}()
		}
	}()
}

func (p *fakePeer) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *fakePeer) revive(t *testing.T) {
	var ln net.Listener
	var err error
	for range 50 { // the port was just released
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	p.serve(ln)
}

// tnode is one simulated cache node: a fake RESP listener, a Syncer
// keeping its State, and its Monitor.
type tnode struct {
	id      string
	peer    *fakePeer
	offset  atomic.Int64
	probe   func(ctx context.Context, addr string) error
	state   *cluster.State
	mon     *Monitor
	reg     *prometheus.Registry
	cancel  context.CancelFunc
	done    sync.WaitGroup
	running bool
}

type tcluster struct {
	t       *testing.T
	g       *kvtest.Group
	name    string
	nodes   map[string]*tnode
	mu      sync.Mutex
	publish []string // "<node> <epoch> <why>"
	pubCh   chan string
}

func (c *tcluster) client() *topology.Client {
	return &topology.Client{Addrs: c.g.HTTPAddrs, Cluster: c.name}
}

// newCluster publishes epoch 1: primaries a, b, c (thirds of the slots)
// and the given replicas ("a1" replicates "a").
func newCluster(t *testing.T, g *kvtest.Group, name string, replicas ...string) *tcluster {
	c := &tcluster{t: t, g: g, name: name, nodes: map[string]*tnode{}, pubCh: make(chan string, 64)}
	spec := cluster.Spec{Epoch: 1}
	ranges := map[string]string{"a": "0-5460", "b": "5461-10922", "c": "10923-16383"}
	for _, id := range append([]string{"a", "b", "c"}, replicas...) {
		n := &tnode{id: id, peer: newFakePeer(t)}
		c.nodes[id] = n
		host, port, _ := net.SplitHostPort(n.peer.addr)
		var p int
		fmt.Sscan(port, &p)
		ns := cluster.NodeSpec{ID: id, Host: host, Port: p}
		if r, ok := ranges[id]; ok {
			ns.Slots = []string{r}
		} else {
			ns.ReplicaOf = id[:1]
		}
		spec.Nodes = append(spec.Nodes, ns)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.client().Publish(ctx, spec, 0); err != nil {
		t.Fatal(err)
	}
	return c
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("FAILOVER_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (c *tcluster) start(id string) {
	t := c.t
	n := c.nodes[id]
	ctx, cancel := context.WithCancel(context.Background())
	syncer := &topology.Syncer{Client: c.client(), SelfID: id, CheckInterval: testInterval, Logger: testLogger(t)}
	lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
	st, err := syncer.Load(lctx)
	lcancel()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	n.state = st
	n.reg = prometheus.NewRegistry()
	mon, err := New(Config{Client: c.client(), State: st, SelfID: id, Probe: n.probe,
		Interval: testInterval, FailAfter: testFailAfter, Lease: testLease,
		ReplOffset: n.offset.Load, Logger: testLogger(t), Registerer: n.reg,
		OnPublish: func(epoch uint64, why string) {
			s := fmt.Sprintf("%s %d %s", id, epoch, why)
			c.mu.Lock()
			c.publish = append(c.publish, s)
			c.mu.Unlock()
			c.pubCh <- s
		}})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	n.mon, n.cancel, n.running = mon, cancel, true
	n.done.Go(func() { _ = syncer.Run(ctx) })
	n.done.Go(func() { _ = mon.Run(ctx) })
	t.Cleanup(func() { c.stop(id) })
}

func (c *tcluster) stop(id string) {
	n := c.nodes[id]
	if !n.running {
		return
	}
	n.running = false
	n.cancel()
	n.done.Wait()
}

func (c *tcluster) startAll() {
	for id := range c.nodes {
		c.start(id)
	}
	// Steady state: every monitor counts every node's report.
	c.waitFor(10*time.Second, "every monitor sees every report", func() bool {
		for _, n := range c.nodes {
			if len(n.mon.Status().Reports) != len(c.nodes) {
				return false
			}
		}
		return true
	})
}

func (c *tcluster) waitFor(d time.Duration, what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out after %s waiting until %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *tcluster) load() *topology.Topology {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	top, err := c.client().Load(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	return top
}

func (c *tcluster) publications() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.publish)
}

func (c *tcluster) checkHistory(wantEpochs int) {
	t := c.t
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := History(ctx, c.client())
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckHistory(h); err != nil {
		t.Fatal(err)
	}
	if len(h) != wantEpochs {
		t.Fatalf("history has %d versions, want %d: %+v", len(h), wantEpochs, h)
	}
}

func nodeSpec(s cluster.Spec, id string) cluster.NodeSpec {
	for _, n := range s.Nodes {
		if n.ID == id {
			return n
		}
	}
	return cluster.NodeSpec{}
}

func TestConfigValidation(t *testing.T) {
	c := &topology.Client{Addrs: []string{"127.0.0.1:1"}, Cluster: "x"}
	m, _ := cluster.Spec{Epoch: 1, Nodes: []cluster.NodeSpec{{ID: "a", Host: "h", Port: 1, Slots: []string{"0-16383"}}}}.Map("a")
	st := cluster.NewState(m)
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Client: c, State: st, SelfID: "a", Lease: 3 * time.Second}, "shorter than fail-after"},
		{Config{Client: c, State: st, SelfID: "a", Lease: 4 * time.Second, FailAfter: 3 * time.Second}, "shorter than fail-after"},
		{Config{Client: c, State: st, SelfID: "a", Lease: 400 * time.Millisecond}, "longer than the interval"},
		{Config{Client: c, State: st}, "required"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	mon, err := New(Config{Client: c, State: st, SelfID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if mon.cfg.Lease != DefaultLease || mon.cfg.FailAfter != DefaultFailAfter || mon.cfg.PromotionHold != 2200*time.Millisecond {
		t.Fatalf("defaults: %+v", mon.cfg)
	}
	// Never confirmed: a primary refuses writes.
	if f := mon.WriteFence(); !strings.Contains(f, "not been confirmed") {
		t.Fatalf("fence before the first read: %q", f)
	}
}

func TestPromoteSpec(t *testing.T) {
	s := cluster.Spec{Epoch: 4, Nodes: []cluster.NodeSpec{
		{ID: "a", Host: "h", Port: 1, Slots: []string{"0-100", "200"}},
		{ID: "a1", Host: "h", Port: 2, ReplicaOf: "a"},
		{ID: "a2", Host: "h", Port: 3, ReplicaOf: "a", Failed: true},
		{ID: "b", Host: "h", Port: 4, Slots: []string{"101-199", "201-16383"}},
		{ID: "b1", Host: "h", Port: 5, ReplicaOf: "b"},
	}, Migrations: []cluster.MigrationSpec{
		{Slot: 5, From: "a", To: "b", State: cluster.Migrating},
		{Slot: 300, From: "b", To: "a", State: cluster.Importing},
		{Slot: 301, From: "b", To: "b", State: cluster.Importing},
	}}
	got := promoteSpec(s, "a", "a1")
	if got.Epoch != 5 || s.Epoch != 4 {
		t.Fatalf("epoch %d (input %d)", got.Epoch, s.Epoch)
	}
	want := map[string]cluster.NodeSpec{
		"a":  {ID: "a", Host: "h", Port: 1, ReplicaOf: "a1", Failed: true},
		"a1": {ID: "a1", Host: "h", Port: 2, Slots: []string{"0-100", "200"}},
		"a2": {ID: "a2", Host: "h", Port: 3, ReplicaOf: "a1", Failed: true},
		"b1": {ID: "b1", Host: "h", Port: 5, ReplicaOf: "b"},
	}
	for id, w := range want {
		if g := nodeSpec(got, id); fmt.Sprint(g) != fmt.Sprint(w) {
			t.Errorf("%s = %+v, want %+v", id, g, w)
		}
	}
	if len(got.Migrations) != 1 || got.Migrations[0].Slot != 301 {
		t.Errorf("migrations %+v: those from or to a must go", got.Migrations)
	}
	if nodeSpec(s, "a").ReplicaOf != "" || len(nodeSpec(s, "a1").Slots) != 0 {
		t.Error("promoteSpec modified its input")
	}
	if r, f := Role(mustMap(t, got, "a")); r || f.ID != "a1" {
		t.Errorf("Role(a) = %v, %v", r, f)
	}
	if r, f := Role(mustMap(t, got, "a1")); !r || f != nil {
		t.Errorf("Role(a1) = %v, %v", r, f)
	}
}

func mustMap(t *testing.T, s cluster.Spec, self string) *cluster.Map {
	s.Migrations = nil
	m, err := s.Map(self)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestFailover runs the scenarios against one real kvnode group, each on
// its own cluster name; the last one kills the group.
func TestFailover(t *testing.T) {
	g := kvtest.Start(t, "cache")
	t.Run("Promotion", func(t *testing.T) { testPromotion(t, g) })
	t.Run("NoQuorum", func(t *testing.T) { testNoQuorum(t, g) })
	t.Run("ConcurrentCandidates", func(t *testing.T) { testConcurrentCandidates(t, g) })
	t.Run("Lease", func(t *testing.T) { runLeaseTest(t, g) })
}

// Kill primary a of {a, b, c} with replicas a1 (offset 100), a2 (offset
// 200), b1, c1: a2 is promoted once, a becomes its failed replica and a1
// follows it; a returns and its failed flag is cleared.
func testPromotion(t *testing.T, g *kvtest.Group) {
	c := newCluster(t, g, "promote", "a1", "a2", "b1", "c1")
	c.nodes["a1"].offset.Store(100)
	c.nodes["a2"].offset.Store(200)
	c.startAll()
	for _, id := range []string{"a", "b", "c"} {
		if f := c.nodes[id].mon.WriteFence(); f != "" {
			t.Fatalf("primary %s fenced with a reachable store: %q", id, f)
		}
	}

	killed := time.Now()
	c.nodes["a"].peer.kill()
	c.stop("a")
	var why string
	select {
	case why = <-c.pubCh:
	case <-time.After(15 * time.Second):
		t.Fatal("no promotion within 15 s")
	}
	took := time.Since(killed)
	t.Logf("kill → promotion published: %s (%s; fail-after %s, interval %s)", took.Round(time.Millisecond), why, testFailAfter, testInterval)
	if took < testFailAfter {
		t.Fatalf("promoted after %s, before fail-after %s", took, testFailAfter)
	}
	if took > testFailAfter+10*testInterval+time.Second {
		t.Errorf("promotion took %s", took)
	}
	if !strings.HasPrefix(why, "a2 2 promote a2 over failed a") {
		t.Fatalf("publication %q, want a2 promoting itself at epoch 2", why)
	}
	top := c.load()
	s := top.Spec
	if s.Epoch != 2 {
		t.Fatalf("epoch %d", s.Epoch)
	}
	if a := nodeSpec(s, "a"); a.ReplicaOf != "a2" || !a.Failed || len(a.Slots) != 0 {
		t.Fatalf("a = %+v", a)
	}
	if a2 := nodeSpec(s, "a2"); a2.ReplicaOf != "" || a2.Failed || fmt.Sprint(a2.Slots) != "[0-5460]" {
		t.Fatalf("a2 = %+v", a2)
	}
	if a1 := nodeSpec(s, "a1"); a1.ReplicaOf != "a2" || a1.Failed {
		t.Fatalf("a1 = %+v", a1)
	}
	// The new primary holds writes for the old primary's lease.
	a2 := c.nodes["a2"]
	c.waitFor(5*time.Second, "a2 installs epoch 2", func() bool { return a2.state.Load().Epoch >= 2 })
	if f := a2.mon.WriteFence(); !strings.Contains(f, "just promoted") {
		t.Errorf("a2 fence right after its promotion: %q", f)
	}
	c.waitFor(5*time.Second, "a2 takes writes", func() bool { return a2.mon.WriteFence() == "" })
	t.Logf("kill → a2 takes writes: %s", time.Since(killed).Round(time.Millisecond))
	if p, f := Role(c.nodes["a1"].state.Load()); p || f == nil || f.ID != "a2" {
		t.Errorf("a1 follows %v", f)
	}
	if v := metricValue(a2.mon.promotions); v != 1 {
		t.Errorf("a2 promotions_total = %v", v)
	}

	// a comes back: a quorum sees it, its failed flag is cleared by the
	// lowest-id live primary (a2), and it stays a2's replica.
	c.nodes["a"].peer.revive(t)
	c.start("a")
	if p, f := Role(c.nodes["a"].state.Load()); p || f.ID != "a2" {
		t.Fatalf("returning a: primary %v, follows %v", p, f)
	}
	if fence := c.nodes["a"].mon.WriteFence(); fence != "" {
		t.Errorf("returning a (a replica) fenced: %q", fence) // routing refuses its writes
	}
	select {
	case why = <-c.pubCh:
	case <-time.After(10 * time.Second):
		t.Fatal("a's failed flag not cleared within 10 s")
	}
	if !strings.HasPrefix(why, "a2 3 failed [], recovered [a]") {
		t.Fatalf("publication %q", why)
	}
	s = c.load().Spec
	if a := nodeSpec(s, "a"); a.ReplicaOf != "a2" || a.Failed {
		t.Fatalf("a = %+v", a)
	}
	time.Sleep(3 * testInterval)
	if pubs := c.publications(); len(pubs) != 2 {
		t.Fatalf("publications %q, want exactly one promotion and one clear", pubs)
	}
	c.checkHistory(3)
}

// Only c finds a unreachable (b still reaches it): one primary's view is
// not a quorum of two, nothing is published.
func testNoQuorum(t *testing.T, g *kvtest.Group) {
	c := newCluster(t, g, "noquorum", "a1", "b1", "c1")
	aAddr := c.nodes["a"].peer.addr
	p := &Pinger{}
	c.nodes["b"].probe = func(ctx context.Context, addr string) error {
		if addr == aAddr {
			return nil
		}
		return p.Probe(ctx, addr)
	}
	c.startAll()
	c.nodes["a"].peer.kill()
	c.stop("a")
	a1 := c.nodes["a1"]
	c.waitFor(10*time.Second, "a1 counts c's report of a down for fail-after", func() bool {
		r, ok := a1.mon.Status().Reports["c"]
		return ok && r.DownMS["a"] >= testFailAfter.Milliseconds()
	})
	time.Sleep(testFailAfter)
	if r := a1.mon.Status().Reports["b"]; r.DownMS["a"] != 0 || !slices.Contains(r.Up, "a") {
		t.Fatalf("b's report %+v", r)
	}
	if pubs := c.publications(); len(pubs) != 0 {
		t.Fatalf("published on one primary's view: %q", pubs)
	}
	if e := c.load().Spec.Epoch; e != 1 {
		t.Fatalf("epoch %d", e)
	}
}

// Two replicas of a that each believe they are the candidate (each misses
// the other's report) publish from the same revision: the compare-and-set
// lets exactly one through, and the other, reading the map again, finds
// nothing left to do.
func testConcurrentCandidates(t *testing.T, g *kvtest.Group) {
	c := newCluster(t, g, "race", "a1", "a2")
	top := c.load()
	var mu sync.Mutex
	var pubs []string
	mons := map[string]*Monitor{}
	for _, id := range []string{"a1", "a2"} {
		m, err := New(Config{Client: c.client(), State: cluster.NewState(mustMap(t, top.Spec, id)), SelfID: id,
			Interval: testInterval, FailAfter: testFailAfter, Lease: testLease,
			OnPublish: func(epoch uint64, why string) {
				mu.Lock()
				pubs = append(pubs, why)
				mu.Unlock()
			}})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now().UnixMilli()
		m.own = Report{Node: id, At: now, Epoch: 1}
		for _, v := range []string{"b", "c"} {
			m.reports[v] = received{r: Report{Node: v, At: now, Epoch: 1, DownMS: map[string]int64{"a": 2000}}, rev: 1, at: m.mono()}
		}
		mons[id] = m
	}
	for id, m := range mons {
		if a := m.decide(top, m.fresh()); a == nil || !a.promote {
			t.Fatalf("%s does not see itself as the candidate: %+v", id, a)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, m := range mons {
		wg.Go(func() {
			<-start
			m.act(ctx, top)
		})
	}
	close(start)
	wg.Wait()
	if len(pubs) != 1 {
		t.Fatalf("publications %q, want exactly one", pubs)
	}
	conflicts := metricValue(mons["a1"].conflicts) + metricValue(mons["a2"].conflicts)
	if conflicts != 1 {
		t.Fatalf("conflicts %v, want 1", conflicts)
	}
	s := c.load().Spec
	winner := strings.Fields(pubs[0])[1]
	loser := map[string]string{"a1": "a2", "a2": "a1"}[winner]
	if s.Epoch != 2 || nodeSpec(s, loser).ReplicaOf != winner || nodeSpec(s, "a").ReplicaOf != winner {
		t.Fatalf("stored %+v after %q", s, pubs)
	}
	c.checkHistory(2)
}

// Primaries take writes while their reads of the store succeed, and refuse
// them once the store has been unreachable for the lease.
func runLeaseTest(t *testing.T, g *kvtest.Group) {
	c := newCluster(t, g, "lease")
	c.startAll()
	for _, id := range []string{"a", "b", "c"} {
		if f := c.nodes[id].mon.WriteFence(); f != "" {
			t.Fatalf("%s fenced: %q", id, f)
		}
		if v := metricValue(c.nodes[id].mon.fenceGauge); v != 0 {
			t.Fatalf("%s write_fence_active = %v", id, v)
		}
	}
	killed := time.Now()
	for i := range 3 {
		g.Kill(i)
	}
	c.waitFor(testLease+2*testInterval+time.Second, "every primary is fenced", func() bool {
		for _, id := range []string{"a", "b", "c"} {
			if c.nodes[id].mon.WriteFence() == "" {
				return false
			}
		}
		return true
	})
	took := time.Since(killed)
	t.Logf("store killed → every primary fenced: %s (lease %s)", took.Round(time.Millisecond), testLease)
	if took < testLease-testInterval {
		t.Fatalf("fenced after %s, before the lease could run out", took)
	}
	f := c.nodes["a"].mon.WriteFence()
	if !strings.HasPrefix(f, "CLUSTERDOWN The cluster topology could not be confirmed for ") {
		t.Fatalf("fence %q", f)
	}
	if v := metricValue(c.nodes["a"].mon.fenceGauge); v != 1 {
		t.Fatalf("write_fence_active = %v", v)
	}
}

// metricValue is the value of a collector of one counter or gauge.
func metricValue(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var d dto.Metric
	if err := (<-ch).Write(&d); err != nil {
		panic(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}
