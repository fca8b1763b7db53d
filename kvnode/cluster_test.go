package kvnode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/internal/authz/authztest"
	"github.com/portico-io/portico/kvnode/antientropy"
	"github.com/portico-io/portico/kvnode/ring"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"

	"github.com/portico-io/portico/internal/testdeps"
)

// fakeClock is data time (TTL, hints, grace) shared by a test cluster.
type fakeClock struct{ off atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *fakeClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// cluster is N nodes in this process on loopback: real gRPC, real pebble.
type cluster struct {
	t      testing.TB
	ctx    context.Context
	clock  *fakeClock
	mu     sync.Mutex
	nodes  map[string]*Node
	cfgs   map[string]Config
	order  []string
	events chan struct{}
	client *http.Client
	tweak  func(*Config)
}

func newCluster(t testing.TB, size int, tweak func(*Config)) *cluster {
	t.Helper()
	c := &cluster{
		t: t, ctx: t.Context(), clock: &fakeClock{}, nodes: map[string]*Node{}, cfgs: map[string]Config{},
		events: make(chan struct{}, 1), client: adminClient(60 * time.Second), tweak: tweak,
	}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, n := range c.nodes {
			_ = n.Stop()
		}
	})
	// All nodes start at once, each with the others as seeds, and found one
	// ring together (the make run path); later nodes join it (add).
	addrs := testdeps.FreeAddrs(t, 2*size)
	var seeds []string
	for i := range size {
		seeds = append(seeds, addrs[2*i])
	}
	for i := range size {
		id := fmt.Sprintf("n%d", i)
		cfg := c.baseConfig(id)
		cfg.GRPCAddr, cfg.HTTPAddr = addrs[2*i], addrs[2*i+1]
		cfg.Seeds = slices.Delete(slices.Clone(seeds), i, i+1)
		c.register(id, cfg)
	}
	for _, id := range c.ids() {
		c.start(id)
	}
	for _, id := range c.ids() {
		c.waitNormal(id)
	}
	return c
}

func (c *cluster) baseConfig(id string) Config {
	return Config{
		NodeID: id, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: c.t.TempDir(),
		Replication: 3, GossipInterval: 20 * time.Millisecond, HintInterval: 20 * time.Millisecond,
		PhiThreshold: 20, WriteTimeout: 3 * time.Second, ReadTimeout: 3 * time.Second, StartupWait: 5 * time.Second,
		RepairInterval: time.Hour, RepairDepth: 5, NoSync: true, Now: c.clock.Now,
		OnHintPass: c.signal, InsecurePlaintext: true, Auth: AuthConfig{Tokens: testTokens},
	}
}

// testTokens hold one API token per authz role; every test node accepts
// them (auth is on in the tests as in production).
var testTokens = authztest.NewTokens()

// bearer adds "Authorization: Bearer <tok>" to requests that carry none.
type bearer struct {
	base http.RoundTripper
	tok  string
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Authorization") == "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.tok)
	}
	return b.base.RoundTrip(r)
}

// adminClient calls the nodes' plaintext APIs with the admin token.
func adminClient(timeout time.Duration) *http.Client {
	return roleClient(authz.Admin, http.DefaultTransport.(*http.Transport).Clone(), timeout)
}

// roleClient calls with role's test token over base.
func roleClient(role authz.Role, base http.RoundTripper, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: bearer{base: base, tok: testTokens.Token(role)}}
}

func (c *cluster) register(id string, cfg Config) {
	if c.tweak != nil {
		c.tweak(&cfg)
	}
	c.mu.Lock()
	c.cfgs[id] = cfg
	c.order = append(c.order, id)
	c.mu.Unlock()
}

func (c *cluster) signal() {
	select {
	case c.events <- struct{}{}:
	default:
	}
}

// add starts a new node seeded with the first node; it joins the ring
// (at once, or on POST /admin/v1/join with JoinManual).
func (c *cluster) add(id, joinMode string) *Node {
	c.t.Helper()
	cfg := c.baseConfig(id)
	cfg.Seeds = []string{c.node(c.ids()[0]).GRPCAddr()}
	cfg.JoinMode = joinMode
	c.register(id, cfg)
	return c.start(id)
}

func (c *cluster) start(id string) *Node {
	c.t.Helper()
	c.mu.Lock()
	cfg := c.cfgs[id]
	c.mu.Unlock()
	n, err := New(cfg)
	if err != nil {
		c.t.Fatalf("new %s: %v", id, err)
	}
	if err := n.Start(c.ctx); err != nil {
		c.t.Fatalf("start %s: %v", id, err)
	}
	// Restarts keep their ports, as a restarted process would.
	cfg.GRPCAddr, cfg.HTTPAddr = n.GRPCAddr(), n.HTTPAddr()
	c.mu.Lock()
	c.cfgs[id] = cfg
	c.nodes[id] = n
	c.mu.Unlock()
	go func() {
		for {
			select {
			case <-c.ctx.Done():
				return
			case <-n.Membership().Changed():
				c.signal()
			}
		}
	}()
	return n
}

func (c *cluster) node(id string) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

func (c *cluster) ids() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.order)
}

// kill stops a node (its data dir stays for restart).
func (c *cluster) kill(id string) {
	c.t.Helper()
	if err := c.node(id).Stop(); err != nil {
		c.t.Fatalf("stop %s: %v", id, err)
	}
}

// waitUntil re-checks cond on every cluster event (hint passes every 20ms,
// membership changes) until it holds or the deadline passes.
func (c *cluster) waitUntil(what string, timeout time.Duration, cond func() bool) {
	c.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-c.events:
		case <-deadline.C:
			c.t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
	}
}

func (c *cluster) waitNormal(id string) {
	c.t.Helper()
	c.waitUntil(id+" NORMAL on every node", 60*time.Second, func() bool {
		for _, other := range c.ids() {
			n := c.node(other)
			if n == nil {
				continue
			}
			m, ok := n.Membership().Member(id)
			if !ok || m.State != kvv1.MemberState_MEMBER_STATE_NORMAL {
				return false
			}
		}
		return true
	})
}

// waitAlive waits until every running node sees id as up (or down).
func (c *cluster) waitAlive(id string, up bool, running ...string) {
	c.t.Helper()
	c.waitUntil(fmt.Sprintf("%s alive=%v", id, up), 20*time.Second, func() bool {
		for _, o := range running {
			if c.node(o).Membership().Alive(id) != up {
				return false
			}
		}
		return true
	})
}

// url is path on node id's API: https when the node has TLS files (the
// test then gives c.client a TLS transport, see useTLS).
func (c *cluster) url(id, path string) string {
	c.mu.Lock()
	scheme := "http://"
	if c.cfgs[id].TLS.IsSet() {
		scheme = "https://"
	}
	c.mu.Unlock()
	return scheme + c.node(id).HTTPAddr() + path
}

type httpResult struct {
	status int
	header http.Header
	body   []byte
}

func (c *cluster) do(method, id, path string, body []byte, hdr map[string]string) (httpResult, error) {
	req, err := http.NewRequestWithContext(c.ctx, method, c.url(id, path), bytes.NewReader(body))
	if err != nil {
		return httpResult{}, err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return httpResult{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return httpResult{resp.StatusCode, resp.Header, b}, err
}

func (c *cluster) mustDo(method, id, path string, body []byte, hdr map[string]string, want int) httpResult {
	c.t.Helper()
	r, err := c.do(method, id, path, body, hdr)
	if err != nil {
		c.t.Fatalf("%s %s on %s: %v", method, path, id, err)
	}
	if r.status != want {
		c.t.Fatalf("%s %s on %s: status %d, want %d: %s", method, path, id, r.status, want, r.body)
	}
	return r
}

// replicas returns the current replicas of key as seen by node id.
func (c *cluster) replicas(id string, key string) []string {
	cur, _ := c.node(id).Membership().Rings()
	return cur.Preference(ring.Token([]byte(key)))
}

// localValue reads key straight from one node's pebble store.
func (c *cluster) localValue(id, key string) (string, bool) {
	c.t.Helper()
	recs, err := c.node(id).Store().Get([]byte(key))
	if err != nil {
		c.t.Fatalf("local get on %s: %v", id, err)
	}
	if len(recs) != 1 || recs[0].Tombstone {
		return "", false
	}
	return string(recs[0].Value), true
}

func (c *cluster) hintsPending() int {
	total := 0
	for _, id := range c.ids() {
		total += c.node(id).Hints().PendingTotal()
	}
	return total
}

func TestQuorumWritesWithNodeDownCatchUpThroughHints(t *testing.T) {
	c := newCluster(t, 5, nil)
	down := "n2"
	c.kill(down)
	up := []string{"n0", "n1", "n3", "n4"}
	c.waitAlive(down, false, up...)

	var mine []string
	for i := range 100 {
		key := fmt.Sprintf("hint:%d", i)
		r := c.mustDo("PUT", up[i%len(up)], "/v1/kv/"+key+"?consistency=QUORUM", []byte("v-"+key), nil, http.StatusOK)
		if got := r.header.Get("X-KV-Acks"); got != "2/3" && got != "3/3" {
			t.Fatalf("X-KV-Acks = %q", got)
		}
		if slices.Contains(c.replicas("n0", key), down) {
			mine = append(mine, key)
		}
	}
	if len(mine) == 0 {
		t.Fatal("no key placed on the down node; the ring is broken")
	}
	if p := c.hintsPending(); p < len(mine) {
		t.Fatalf("%d hints pending, want at least %d", p, len(mine))
	}
	// Reads at QUORUM keep working with the node down.
	for _, key := range mine[:5] {
		r := c.mustDo("GET", "n0", "/v1/kv/"+key, nil, nil, http.StatusOK)
		if string(r.body) != "v-"+key {
			t.Fatalf("read %s = %q", key, r.body)
		}
	}

	c.start(down)
	c.waitAlive(down, true, up...)
	c.waitUntil("hints replayed", 20*time.Second, func() bool { return c.hintsPending() == 0 })
	for _, key := range mine {
		if v, ok := c.localValue(down, key); !ok || v != "v-"+key {
			t.Fatalf("%s on the returned node = %q, %v after hint replay", key, v, ok)
		}
	}
	var replayed int64
	for _, id := range up {
		replayed += c.node(id).Hints().Replayed.Load()
	}
	if replayed < int64(len(mine)) {
		t.Fatalf("replayed %d hints, want >= %d", replayed, len(mine))
	}
}

func TestReadRepairFixesStaleReplica(t *testing.T) {
	c := newCluster(t, 5, nil)
	key := "rr:key"
	c.mustDo("PUT", "n0", "/v1/kv/"+key+"?consistency=ALL", []byte("old"), nil, http.StatusOK)
	reps := c.replicas("n0", key)
	// A newer write lands on two replicas only (the third missed it).
	newer := &kvv1.Record{Timestamp: c.node("n0").clock.Now(), Value: []byte("new")}
	for _, id := range reps[:2] {
		if _, err := c.node(id).Store().Apply([]byte(key), []*kvv1.Record{newer}); err != nil {
			t.Fatal(err)
		}
	}
	stale := reps[2]
	if v, _ := c.localValue(stale, key); v != "old" {
		t.Fatalf("setup: stale replica has %q", v)
	}
	before := c.node("n1").Coordinator().ReadRepairs.Load()
	r := c.mustDo("GET", "n1", "/v1/kv/"+key+"?consistency=ALL", nil, nil, http.StatusOK)
	if string(r.body) != "new" {
		t.Fatalf("read = %q, want new", r.body)
	}
	// Blocking read repair: fixed before the response was sent.
	if v, _ := c.localValue(stale, key); v != "new" {
		t.Fatalf("stale replica still has %q after read repair", v)
	}
	if c.node("n1").Coordinator().ReadRepairs.Load() <= before {
		t.Fatal("read repair not counted")
	}
}

func TestMerkleRepairAfterHintsExpired(t *testing.T) {
	c := newCluster(t, 5, nil)
	down := "n3"
	up := []string{"n0", "n1", "n2", "n4"}
	c.kill(down)
	c.waitAlive(down, false, up...)
	var mine []string
	for i := range 150 {
		key := fmt.Sprintf("ae:%d", i)
		c.mustDo("PUT", up[i%len(up)], "/v1/kv/"+key, []byte("v"+key), nil, http.StatusOK)
		if slices.Contains(c.replicas("n0", key), down) {
			mine = append(mine, key)
		}
	}
	var expiredBefore int64
	for _, id := range up {
		expiredBefore += c.node(id).Hints().Expired.Load()
	}
	c.clock.Advance(4 * time.Hour) // past the 3h hint window
	c.waitUntil("hints expired", 20*time.Second, func() bool { return c.hintsPending() == 0 })
	c.start(down)
	c.waitAlive(down, true, up...)
	for _, key := range mine {
		if _, ok := c.localValue(down, key); ok {
			t.Fatalf("%s reached the returned node although its hints expired", key)
		}
	}
	// On demand, through the admin API.
	var res antientropy.Result
	if err := json.Unmarshal(c.mustDo("POST", down, "/admin/v1/repair", nil, nil, http.StatusOK).body, &res); err != nil {
		t.Fatal(err)
	}
	if res.Failed != 0 || res.Pulled < len(mine) {
		t.Fatalf("repair: %+v, want every range repaired and >= %d keys pulled", res, len(mine))
	}
	for _, key := range mine {
		if v, ok := c.localValue(down, key); !ok || v != "v"+key {
			t.Fatalf("%s on the repaired node = %q, %v", key, v, ok)
		}
	}
	// A second pass finds nothing left to stream.
	if res := c.node(down).Repairer().RepairAll(c.ctx); res.Pulled != 0 || res.Pushed != 0 {
		t.Fatalf("second repair streamed %d/%d keys", res.Pulled, res.Pushed)
	}
	body := string(c.mustDo("GET", down, "/metrics", nil, nil, http.StatusOK).body)
	for _, m := range []string{"portico_kvnode_repair_last_full_timestamp_seconds", "portico_kvnode_repair_range_last_repaired_timestamp_seconds{range_end="} {
		if !strings.Contains(body, m) {
			t.Fatalf("repair metric %s missing", m)
		}
	}
	if _, full, _ := c.node(down).Repairer().Status(); full.IsZero() {
		t.Fatal("last full repair time not recorded")
	}
}
