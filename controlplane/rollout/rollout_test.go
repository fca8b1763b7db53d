package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/controlplane/nodes"
	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/controlplane/store"
	"github.com/portico-io/portico/controlplane/xds"
	"github.com/portico-io/portico/internal/testdeps"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// env is one database with its config store, shared by the replicas of a test.
type env struct {
	t     *testing.T
	url   string
	st    *store.Store
	clock *clock

	pool *pgxpool.Pool // for assertions on the tables

	mu        sync.Mutex
	rollbacks []int64 // versions Rollback was asked for
}

func newEnv(t *testing.T) *env {
	url := testdeps.Postgres(t)
	st, err := store.Open(testCtx(t), store.Config{DatabaseURL: url, PollInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	pool, err := pgxpool.New(testCtx(t), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &env{t: t, url: url, st: st, pool: pool, clock: newClock()}
}

// commit makes a new version adding a cluster and returns it.
func (e *env) commit(name string) int64 {
	e.t.Helper()
	c := &spec.Cluster{Name: name, Endpoints: []spec.Endpoint{{Address: "127.0.0.1", Port: 18900}}}
	res, err := e.st.Apply(testCtx(e.t), store.Meta{Author: "test", Reason: "test"},
		[]store.Change{{Kind: spec.KindCluster, Name: name, Resource: c}}, nil)
	if err != nil {
		e.t.Fatalf("apply: %v", err)
	}
	return res.Version
}

func (e *env) snapshots(ctx context.Context, v int64) (cache.ResourceSnapshot, error) {
	cfg := spec.NewConfig(0)
	if v > 0 {
		var err error
		if cfg, err = e.st.ConfigAt(ctx, v); err != nil {
			return nil, err
		}
	}
	return compile.Compile(cfg, compile.Options{})
}

func (e *env) rollback(ctx context.Context, to int64, reason string) (int64, error) {
	e.mu.Lock()
	e.rollbacks = append(e.rollbacks, to)
	e.mu.Unlock()
	res, err := e.st.Rollback(ctx, store.Meta{Author: "rollout", Reason: reason}, to, nil)
	return res.Version, err
}

// replica is one control-plane replica: tracker, xDS server, controller.
type replica struct {
	t       *testing.T
	tracker *nodes.Tracker
	xds     *xds.Server
	ctl     *Controller
	reg     *prometheus.Registry
}

func (e *env) replica(id, mode string) *replica {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	tr := nodes.NewTracker()
	xs := xds.New(ctx, xds.Config{Tracker: tr})
	reg := prometheus.NewRegistry()
	ctl, err := New(testCtx(e.t), Config{
		DatabaseURL: e.url, Mode: mode, Tracker: tr, XDS: xs,
		Snapshots: e.snapshots, Rollback: e.rollback,
		ReplicaID: id, Registerer: reg, timeNow: e.clock.Now,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(ctl.Close)
	return &replica{t: e.t, tracker: tr, xds: xs, ctl: ctl, reg: reg}
}

func (r *replica) step() {
	r.t.Helper()
	if err := r.ctl.Step(testCtx(r.t)); err != nil {
		r.t.Fatalf("step: %v", err)
	}
}

func (r *replica) connect(group string, ids ...string) {
	for _, id := range ids {
		r.tracker.Connect(id, "portico-gateway", group, "", false)
	}
}

// ack makes node id ACK (or NACK) version for the listener and cluster types.
func (r *replica) answer(id string, version int64, nack bool) {
	v := strconv.FormatInt(version, 10)
	for _, typ := range []string{resource.ListenerType, resource.ClusterType} {
		if nack {
			r.tracker.Nack(id, typ, v, "bad config for "+id)
		} else {
			r.tracker.Ack(id, typ, v)
		}
	}
}

// served returns the version the xDS policy gives node id, with latest as
// the published snapshot.
func (r *replica) served(id string, latest cache.ResourceSnapshot) int64 {
	r.t.Helper()
	st, ok := r.tracker.Get(id)
	if !ok {
		r.t.Fatalf("node %s not connected", id)
	}
	snap := r.ctl.SnapshotFor(st, latest)
	if snap == nil {
		snap = latest
	}
	return versionOf(snap)
}

func (r *replica) get(id int64) Rollout {
	r.t.Helper()
	ro, err := r.ctl.Get(testCtx(r.t), id)
	if err != nil {
		r.t.Fatal(err)
	}
	return ro
}

func (r *replica) deployed() int64 {
	r.t.Helper()
	v, err := r.ctl.Deployed(testCtx(r.t))
	if err != nil {
		r.t.Fatal(err)
	}
	return v
}

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(testCtx(e.t), sql, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// configJSON is version v's content without its version number.
func (e *env) configJSON(v int64) string {
	e.t.Helper()
	c, err := e.st.ConfigAt(testCtx(e.t), v)
	if err != nil {
		e.t.Fatal(err)
	}
	cc := *c
	cc.Version = 0
	b, err := json.Marshal(cc)
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

func TestWavesCanaryThenPercentages(t *testing.T) {
	e := newEnv(t)
	v1 := e.commit("a")
	r := e.replica("r1", ModeManual)
	v2 := e.commit("b")
	latest, err := e.snapshots(testCtx(t), v2)
	if err != nil {
		t.Fatal(err)
	}

	canary := []string{"canary-1", "canary-2"}
	var others []string
	for i := range 12 {
		others = append(others, fmt.Sprintf("gw-%02d", i))
	}
	r.connect("canary", canary...)
	r.connect(nodes.DefaultGroup, others...)
	half := map[string]bool{}
	for _, id := range others {
		half[id] = Bucket(id) < 50
	}
	if n := countTrue(half); n == 0 || n == len(others) {
		t.Fatalf("test ids do not split at 50%%: %v", half)
	}

	// Manual mode: the committed head is not served.
	if d := r.deployed(); d != v1 {
		t.Fatalf("deployed = %d, want %d", d, v1)
	}
	for _, id := range append(canary, others...) {
		if got := r.served(id, latest); got != v1 {
			t.Fatalf("before rollout %s served %d, want %d", id, got, v1)
		}
	}

	ro, err := r.ctl.Start(testCtx(t), Spec{Waves: []Wave{{Groups: []string{"canary"}}, {Percent: 50}, {Percent: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	if ro.TargetVersion != v2 || ro.BaselineVersion != v1 || ro.BakeSeconds != DefaultBakeSeconds || ro.State != StateRunning {
		t.Fatalf("started %+v", ro)
	}
	expect := func(wave int, in func(id string) bool) {
		t.Helper()
		for _, id := range append(canary, others...) {
			want := v1
			if in(id) {
				want = v2
			}
			if got := r.served(id, latest); got != want {
				t.Fatalf("wave %d: %s served %d, want %d", wave, id, got, want)
			}
		}
	}
	isCanary := func(id string) bool { return strings.HasPrefix(id, "canary") }

	// Wave 0: canaries only; it does not end before the bake time even
	// when every canary has ACKed.
	expect(0, isCanary)
	r.step()
	for _, id := range canary {
		r.answer(id, v2, false)
	}
	r.step()
	if got := r.get(ro.ID); got.Wave != 0 || got.Nodes != (NodeCounts{Total: 2, Acked: 2}) {
		t.Fatalf("wave 0 after ACKs: wave %d nodes %+v", got.Wave, got.Nodes)
	}
	if g := value(r.ctl.m.wave); g != 1 {
		t.Fatalf("wave gauge %v", g)
	}
	e.clock.Advance(59 * time.Second)
	r.step()
	if got := r.get(ro.ID); got.Wave != 0 {
		t.Fatalf("wave advanced before bake: %d", got.Wave)
	}

	// Wave 1: canaries plus the 50% bucket.
	e.clock.Advance(time.Second)
	r.step()
	if got := r.get(ro.ID); got.Wave != 1 || !got.WaveStartedAt.Equal(e.clock.Now()) {
		t.Fatalf("after bake: wave %d started %v", got.Wave, got.WaveStartedAt)
	}
	expect(1, func(id string) bool { return isCanary(id) || half[id] })
	r.step()
	if got := r.get(ro.ID); got.Nodes.Pending != countTrue(half) {
		t.Fatalf("wave 1 nodes %+v", got.Nodes)
	}
	for _, id := range others {
		if half[id] {
			r.answer(id, v2, false)
		}
	}

	// Wave 2: everyone.
	e.clock.Advance(61 * time.Second)
	r.step()
	expect(2, func(string) bool { return true })
	for _, id := range others {
		if !half[id] {
			r.answer(id, v2, false)
		}
	}
	r.step()
	if got := r.get(ro.ID); got.Nodes != (NodeCounts{Total: 14, Acked: 14}) {
		t.Fatalf("wave 2 nodes %+v", got.Nodes)
	}
	e.clock.Advance(61 * time.Second)
	r.step()
	got := r.get(ro.ID)
	if got.State != StateSucceeded || got.Wave != 2 || got.Nodes.Acked != 14 {
		t.Fatalf("end: %+v", got)
	}
	if d := r.deployed(); d != v2 {
		t.Fatalf("deployed = %d, want %d", d, v2)
	}
	expect(3, func(string) bool { return true })
	if n := e.count(`SELECT count(*) FROM controlplane.rollout_reports`); n != 0 {
		t.Fatalf("%d reports left after the rollout", n)
	}
	if v := value(r.ctl.m.results.WithLabelValues("succeeded")); v != 1 {
		t.Fatalf("succeeded counter %v", v)
	}
	if g := value(r.ctl.m.wave); g != 0 {
		t.Fatalf("wave gauge %v after the rollout", g)
	}
	if len(e.rollbacks) != 0 {
		t.Fatalf("rollbacks %v", e.rollbacks)
	}
}

func countTrue(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

func TestNackInCanaryRollsBack(t *testing.T) {
	e := newEnv(t)
	v1 := e.commit("a")
	r := e.replica("r1", ModeManual)
	v2 := e.commit("b")
	r.connect("canary", "canary-1", "canary-2")
	r.connect(nodes.DefaultGroup, "gw-1", "gw-2")

	ro, err := r.ctl.Start(testCtx(t), Spec{Waves: []Wave{{Groups: []string{"canary"}}, {Percent: 100}}, BakeSeconds: 300})
	if err != nil {
		t.Fatal(err)
	}
	r.answer("canary-1", v2, false)
	r.answer("canary-2", v2, true)
	r.step()

	got := r.get(ro.ID)
	if got.State != StateRolledBack || got.RollbackVersion != v2+1 || got.Nodes.Nacked != 1 || got.Nodes.Total != 2 {
		t.Fatalf("after NACK: %+v", got)
	}
	if !strings.Contains(got.Error, "canary-2") || !strings.Contains(got.Error, "bad config") {
		t.Fatalf("error %q does not name the NACK", got.Error)
	}
	if len(e.rollbacks) != 1 || e.rollbacks[0] != v1 {
		t.Fatalf("Rollback called with %v, want [%d]", e.rollbacks, v1)
	}
	v3 := got.RollbackVersion
	if d := r.deployed(); d != v3 {
		t.Fatalf("deployed = %d, want the rollback version %d", d, v3)
	}
	for _, id := range []string{"canary-1", "canary-2", "gw-1", "gw-2"} {
		if v := r.served(id, nil); v != v3 {
			t.Fatalf("%s served %d, want %d", id, v, v3)
		}
	}
	// The rollback version has the baseline's content.
	if a, b := e.configJSON(v1), e.configJSON(v3); a != b {
		t.Fatalf("rollback version %d differs from baseline %d:\n%s\n%s", v3, v1, b, a)
	}
	if v := value(r.ctl.m.results.WithLabelValues("rolled_back")); v != 1 {
		t.Fatalf("rolled_back counter %v", v)
	}
	// Nothing more happens on later passes.
	e.clock.Advance(time.Hour)
	r.step()
	if len(e.rollbacks) != 1 {
		t.Fatalf("rollbacks %v", e.rollbacks)
	}
}

func TestNackRatioThreshold(t *testing.T) {
	e := newEnv(t)
	e.commit("a")
	r := e.replica("r1", ModeManual)
	v2 := e.commit("b")
	ids := []string{"gw-1", "gw-2", "gw-3", "gw-4"}
	r.connect(nodes.DefaultGroup, ids...)
	ro, err := r.ctl.Start(testCtx(t), Spec{Waves: []Wave{{Percent: 100}}, MaxNackRatio: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	// 1 of 4 NACKs: at the threshold, not above it. The others are pending,
	// so nothing is decided before the bake time.
	r.answer("gw-1", v2, true)
	r.step()
	if got := r.get(ro.ID); got.State != StateRunning {
		t.Fatalf("decided early: %+v", got)
	}
	r.answer("gw-2", v2, false)
	r.answer("gw-3", v2, false)
	r.answer("gw-4", v2, false)
	e.clock.Advance(time.Minute)
	r.step()
	if got := r.get(ro.ID); got.State != StateSucceeded {
		t.Fatalf("1 of 4 NACKs at maxNackRatio 0.25: %+v", got)
	}

	// 2 of 4 above 0.25: once all have answered, it rolls back before the
	// bake time.
	v3 := e.commit("c")
	ro, err = r.ctl.Start(testCtx(t), Spec{Waves: []Wave{{Percent: 100}}, MaxNackRatio: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	r.answer("gw-1", v3, true)
	r.answer("gw-2", v3, true)
	r.step()
	if got := r.get(ro.ID); got.State != StateRunning {
		t.Fatalf("decided with pending nodes: %+v", got)
	}
	r.answer("gw-3", v3, false)
	r.answer("gw-4", v3, false)
	r.step()
	if got := r.get(ro.ID); got.State != StateRolledBack || got.BaselineVersion != v2 {
		t.Fatalf("2 of 4 NACKs: %+v", got)
	}
}

func TestTwoReplicasOneLeaderAndFailover(t *testing.T) {
	e := newEnv(t)
	e.commit("a")
	a := e.replica("a", ModeManual)
	b := e.replica("b", ModeManual)
	v2 := e.commit("b")

	a.step()
	b.step()
	if !a.ctl.Leader() || b.ctl.Leader() {
		t.Fatalf("leaders: a %v b %v", a.ctl.Leader(), b.ctl.Leader())
	}
	a.connect("canary", "canary-a")
	a.connect(nodes.DefaultGroup, "gw-a")
	b.connect("canary", "canary-b")
	b.connect(nodes.DefaultGroup, "gw-b")

	// Started on the follower; the leader applies it on its next pass.
	ro, err := b.ctl.Start(testCtx(t), Spec{Waves: []Wave{{Groups: []string{"canary"}}, {Percent: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	if v := b.served("canary-b", nil); v != v2 {
		t.Fatalf("follower serves canary %d", v)
	}
	a.step()
	if v := a.served("canary-a", nil); v != v2 {
		t.Fatalf("leader serves canary %d", v)
	}
	a.answer("canary-a", v2, false)
	b.answer("canary-b", v2, false)
	b.step()
	a.step()
	if got := a.get(ro.ID); got.Nodes != (NodeCounts{Total: 2, Acked: 2}) {
		t.Fatalf("union of reports: %+v", got.Nodes)
	}

	e.clock.Advance(time.Minute)
	b.step()
	a.step() // leader: next wave
	b.step() // follower applies it
	if a.get(ro.ID).Wave != 1 || b.served("gw-b", nil) != v2 {
		t.Fatal("wave 1 not applied on the follower")
	}
	// A NACK on a node of the follower rolls the rollout back.
	b.answer("gw-b", v2, true)
	b.step()
	a.step()
	got := a.get(ro.ID)
	if got.State != StateRolledBack || !strings.Contains(got.Error, "gw-b") {
		t.Fatalf("follower's NACK not counted: %+v", got)
	}
	b.step()
	for _, r := range []*replica{a, b} {
		for _, id := range []string{"canary-a", "gw-a", "canary-b", "gw-b"} {
			if _, ok := r.tracker.Get(id); ok {
				if v := r.served(id, nil); v != got.RollbackVersion {
					t.Fatalf("%s on %s serves %d, want %d", id, r.ctl.ReplicaID(), v, got.RollbackVersion)
				}
			}
		}
	}

	// Failover: a's loop stops; b takes over the next rollout.
	v4 := e.commit("c")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.ctl.Run(ctx) }()
	ro, err = a.ctl.Start(testCtx(t), Spec{Waves: []Wave{{Groups: []string{"canary"}}, {Percent: 100}}, BakeSeconds: 10})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if a.ctl.Leader() {
		t.Fatal("a still leads after Run returned")
	}
	deadline := time.Now().Add(15 * time.Second)
	for !b.ctl.Leader() {
		if time.Now().After(deadline) {
			t.Fatal("b did not take over")
		}
		b.step()
	}
	b.answer("canary-b", v4, false)
	e.clock.Advance(10 * time.Second)
	b.step()
	b.answer("gw-b", v4, false)
	e.clock.Advance(10 * time.Second)
	b.step()
	if got := b.get(ro.ID); got.State != StateSucceeded || got.TargetVersion != v4 {
		t.Fatalf("after failover: %+v", got)
	}
}

func TestStartValidation(t *testing.T) {
	e := newEnv(t)
	e.commit("a")
	r := e.replica("r1", ModeManual)
	v2 := e.commit("b")
	ctx := testCtx(t)

	for _, tc := range []struct {
		name  string
		spec  Spec
		field string
	}{
		{"no waves", Spec{}, "waves"},
		{"empty wave", Spec{Waves: []Wave{{}}}, "waves[0]"},
		{"percent 0..100", Spec{Waves: []Wave{{Groups: []string{"canary"}}, {Percent: 101}}}, "waves[1].percent"},
		{"negative percent", Spec{Waves: []Wave{{Percent: -5}}}, "waves[0].percent"},
		{"empty groups", Spec{Waves: []Wave{{Groups: []string{}}}}, "waves[0].groups"},
		{"empty group name", Spec{Waves: []Wave{{Groups: []string{"a", ""}}}}, "waves[0].groups[1]"},
		{"both", Spec{Waves: []Wave{{Groups: []string{"a"}, Percent: 10}}}, "waves[0]"},
		{"bake", Spec{Waves: []Wave{{Percent: 10}}, BakeSeconds: -1}, "bakeSeconds"},
		{"ratio", Spec{Waves: []Wave{{Percent: 10}}, MaxNackRatio: 1.5}, "maxNackRatio"},
		{"minNodes", Spec{Waves: []Wave{{Percent: 10}}, MinNodes: -1}, "minNodes"},
		{"unknown version", Spec{Waves: []Wave{{Percent: 10}}, TargetVersion: 99}, "targetVersion"},
		{"deployed version", Spec{Waves: []Wave{{Percent: 10}}, TargetVersion: 1}, "targetVersion"},
	} {
		_, err := r.ctl.Start(ctx, tc.spec)
		var fe *spec.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, spec.ErrInvalid) {
			t.Errorf("%s: err %v, want a field error on %s", tc.name, err, tc.field)
		}
	}
	if rs, err := r.ctl.List(ctx, 0); err != nil || len(rs) != 0 {
		t.Fatalf("invalid specs made rollouts: %v %v", rs, err)
	}

	ro, err := r.ctl.Start(ctx, Spec{Waves: []Wave{{Percent: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ctl.Start(ctx, Spec{Waves: []Wave{{Percent: 10}}, TargetVersion: v2}); !errors.Is(err, ErrRolloutRunning) {
		t.Fatalf("second start: %v", err)
	}
	if _, err := r.ctl.Get(ctx, ro.ID+100); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
	rs, err := r.ctl.List(ctx, 10)
	if err != nil || len(rs) != 1 || rs[0].ID != ro.ID {
		t.Fatalf("list: %v %v", rs, err)
	}
}

func TestAbortReturnsToBaselineWithoutAVersion(t *testing.T) {
	e := newEnv(t)
	v1 := e.commit("a")
	r := e.replica("r1", ModeManual)
	v2 := e.commit("b")
	r.connect("canary", "canary-1")
	ro, err := r.ctl.Start(testCtx(t), Spec{Waves: []Wave{{Groups: []string{"canary"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if v := r.served("canary-1", nil); v != v2 {
		t.Fatalf("canary serves %d", v)
	}
	got, err := r.ctl.Abort(testCtx(t), ro.ID)
	if err != nil || got.State != StateAborted {
		t.Fatalf("abort: %+v %v", got, err)
	}
	if v := r.served("canary-1", nil); v != v1 {
		t.Fatalf("after abort canary serves %d, want %d", v, v1)
	}
	head, _ := e.st.Head(testCtx(t))
	if head != v2 || r.deployed() != v1 || len(e.rollbacks) != 0 {
		t.Fatalf("abort made a version: head %d deployed %d rollbacks %v", head, r.deployed(), e.rollbacks)
	}
	if _, err := r.ctl.Abort(testCtx(t), ro.ID); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("second abort: %v", err)
	}
}

func TestAutoModeQueuesVersionsBehindRollout(t *testing.T) {
	e := newEnv(t)
	v1 := e.commit("a")
	v2 := e.commit("b")
	r := e.replica("r1", ModeAuto)
	r.connect(nodes.DefaultGroup, "gw-1")
	l2, _ := e.snapshots(testCtx(t), v2)

	// Auto mode serves the latest published snapshot.
	if d := r.deployed(); d != v2 {
		t.Fatalf("deployed %d", d)
	}
	if st, _ := r.tracker.Get("gw-1"); r.ctl.SnapshotFor(st, l2) != nil {
		t.Fatal("auto mode overrides latest")
	}
	var fe *spec.FieldError
	if _, err := r.ctl.Start(testCtx(t), Spec{Waves: []Wave{{Percent: 100}}}); !errors.As(err, &fe) || fe.Field != "targetVersion" {
		t.Fatalf("rollout of the deployed head: %v", err)
	}
	// Roll v1 out in waves; v3, committed meanwhile, waits.
	ro, err := r.ctl.Start(testCtx(t), Spec{TargetVersion: v1, Waves: []Wave{{Percent: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	v3 := e.commit("c")
	l3, _ := e.snapshots(testCtx(t), v3)
	r.step()
	if v := r.served("gw-1", l3); v != v1 {
		t.Fatalf("during rollout serves %d, want %d", v, v1)
	}
	if d := r.deployed(); d != v2 {
		t.Fatalf("deployed during rollout %d, want baseline %d", d, v2)
	}
	r.answer("gw-1", v1, false)
	e.clock.Advance(time.Minute)
	r.step()
	if got := r.get(ro.ID); got.State != StateSucceeded {
		t.Fatalf("%+v", got)
	}
	if d := r.deployed(); d != v3 {
		t.Fatalf("after rollout deployed %d, want the queued head %d", d, v3)
	}
	if v := r.served("gw-1", l3); v != v3 {
		t.Fatalf("after rollout serves %d", v)
	}
	// The publisher lagging behind (latest still v2) does not serve v2.
	if v := r.served("gw-1", l2); v != v3 {
		t.Fatalf("with a lagging publisher serves %d", v)
	}
}

// value reads a gauge or counter.
func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return m.Counter.GetValue()
}

func TestReportsFollowNodesAndExpire(t *testing.T) {
	e := newEnv(t)
	e.commit("a")
	a := e.replica("a", ModeManual)
	b := e.replica("b", ModeManual)
	e.commit("b")
	a.connect("canary", "canary-1", "canary-2")
	b.connect("canary", "canary-3")
	a.connect(nodes.DefaultGroup, "gw-1") // not in the rollout
	if _, err := a.ctl.Start(testCtx(t), Spec{Waves: []Wave{{Groups: []string{"canary"}}}, BakeSeconds: 3600}); err != nil {
		t.Fatal(err)
	}
	a.step()
	b.step()
	reports := func() int { return e.count(`SELECT count(*) FROM controlplane.rollout_reports`) }
	if n := reports(); n != 3 {
		t.Fatalf("%d reports, want 3", n)
	}
	// A node that leaves its replica is no longer reported.
	a.tracker.Disconnect("canary-2")
	a.step()
	if n := reports(); n != 2 {
		t.Fatalf("%d reports after a disconnect, want 2", n)
	}
	// A replica that stops reporting is forgotten after ReportTTL.
	e.clock.Advance(DefaultReportTTL + time.Second)
	a.step()
	if n := reports(); n != 1 {
		t.Fatalf("%d reports after b went quiet, want 1", n)
	}
}
