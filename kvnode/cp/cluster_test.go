package cp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/eventually"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/kvnode/api"
	"github.com/portico-io/portico/kvnode/cp"
)

// group is a Raft group of real cp.Groups in this process on loopback:
// the real Raft TCP transport, pebble logs and file snapshots in temp dirs,
// each node behind the real HTTP front door (api.Handler).
type group struct {
	t      testing.TB
	mu     sync.Mutex
	nodes  []*tnode
	peers  []cp.Peer
	client *http.Client
	// tune adjusts each node's configuration before it opens (benchmarks:
	// fsync on, production timeouts); nil keeps the test settings.
	tune func(*cp.Config)
}

type tnode struct {
	id, raftAddr, httpAddr, dir string
	g                           *cp.Group
	srv                         *http.Server
	restored                    chan struct{}
	// stalled blocks HTTP requests (with the Raft stall: a stopped
	// process); nil when running.
	stalled chan struct{}
	// joiner: started without bootstrap, to be added as a voter.
	joiner bool
}

func newGroup(t testing.TB, size int) *group {
	t.Helper()
	return newGroupTuned(t, size, nil)
}

// newGroupTuned is newGroup with tune applied to every node's Config.
func newGroupTuned(t testing.TB, size int, tune func(*cp.Config)) *group {
	t.Helper()
	gr := &group{t: t, client: &http.Client{Timeout: 5 * time.Second}, tune: tune}
	addrs := testdeps.FreeAddrs(t, 2*size)
	for i := range size {
		n := &tnode{id: fmt.Sprintf("c%d", i), raftAddr: addrs[2*i], httpAddr: addrs[2*i+1], dir: t.TempDir(), restored: make(chan struct{}, 16)}
		gr.nodes = append(gr.nodes, n)
		gr.peers = append(gr.peers, cp.Peer{ID: n.id, Addr: n.raftAddr})
	}
	t.Cleanup(func() {
		for i := range gr.nodes {
			gr.kill(i)
		}
	})
	for i := range gr.nodes {
		gr.start(i)
	}
	return gr
}

// testKeyspaces are the keyspaces the tests' nodes declare CP (the
// tests' /v1/cp/ requests and transactions use only these).
var testKeyspaces = []string{"locks", "other", "ks", "acct", "w", "w2", "bench"}

// trailingLogs is small so a snapshot compacts the log: catching up and
// restarting then need the snapshot.
const trailingLogs = 8

// start opens node i (bootstrapping with every node as voter on first
// start, as every node of the launcher would) and serves its HTTP API.
func (gr *group) start(i int) {
	gr.t.Helper()
	n := gr.nodes[i]
	cfg := cp.Config{
		NodeID: n.id, BindAddr: n.raftAddr, HTTPAddr: n.httpAddr, DataDir: n.dir,
		Bootstrap: !n.joiner, Peers: gr.peers,
		// Short enough for quick failovers, long enough that a loaded
		// 2-core machine running the race detector (make test runs every
		// package at once) does not miss heartbeats and churn elections.
		HeartbeatTimeout: 500 * time.Millisecond, ElectionTimeout: 500 * time.Millisecond,
		LeaderLeaseTimeout: 250 * time.Millisecond, ApplyTimeout: 2 * time.Second, NoSync: true,
		TrailingLogs: trailingLogs,
		OnRestore: func() {
			select {
			case n.restored <- struct{}{}:
			default:
			}
		},
	}
	if gr.tune != nil {
		gr.tune(&cfg)
	}
	g, err := cp.Open(gr.t.Context(), cfg)
	if err != nil {
		gr.t.Fatalf("open %s: %v", n.id, err)
	}
	lis, err := net.Listen("tcp", n.httpAddr)
	if err != nil {
		gr.t.Fatalf("listen %s: %v", n.id, err)
	}
	h, err := api.New(api.Config{CP: g, CPKeyspaces: testKeyspaces, InsecureNoAuth: true})
	if err != nil {
		gr.t.Fatal(err)
	}
	gate := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gr.mu.Lock()
		ch := n.stalled
		gr.mu.Unlock()
		if ch != nil {
			select {
			case <-ch:
			case <-r.Context().Done():
				return
			}
		}
		h.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: gate, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	gr.mu.Lock()
	n.g, n.srv = g, srv
	gr.mu.Unlock()
}

// addNode starts a node outside the configuration (no bootstrap) and
// returns its index.
func (gr *group) addNode() int {
	gr.t.Helper()
	addrs := testdeps.FreeAddrs(gr.t, 2)
	n := &tnode{id: fmt.Sprintf("c%d", len(gr.nodes)), raftAddr: addrs[0], httpAddr: addrs[1], dir: gr.t.TempDir(), restored: make(chan struct{}, 16), joiner: true}
	gr.mu.Lock()
	gr.nodes = append(gr.nodes, n)
	gr.mu.Unlock()
	gr.start(len(gr.nodes) - 1)
	return len(gr.nodes) - 1
}

// stall freezes node i (Raft I/O and HTTP) until resume.
func (gr *group) stall(i int) {
	gr.mu.Lock()
	gr.nodes[i].stalled = make(chan struct{})
	gr.mu.Unlock()
	gr.groupOf(i).Stall(true)
}

func (gr *group) resume(i int) {
	gr.groupOf(i).Stall(false)
	gr.mu.Lock()
	if ch := gr.nodes[i].stalled; ch != nil {
		close(ch)
		gr.nodes[i].stalled = nil
	}
	gr.mu.Unlock()
}

// kill stops node i abruptly: open HTTP connections are cut and Raft is
// shut down; its data dir stays for a restart.
func (gr *group) kill(i int) {
	gr.mu.Lock()
	n := gr.nodes[i]
	g, srv := n.g, n.srv
	n.g, n.srv = nil, nil
	if n.stalled != nil {
		close(n.stalled)
		n.stalled = nil
	}
	gr.mu.Unlock()
	if g == nil {
		return
	}
	_ = srv.Close()
	if err := g.Close(); err != nil {
		gr.t.Errorf("close %s: %v", n.id, err)
	}
}

func (gr *group) groupOf(i int) *cp.Group {
	gr.mu.Lock()
	defer gr.mu.Unlock()
	return gr.nodes[i].g
}

// waitLeader waits until a running node leads and every running node
// knows the leader's HTTP address (so followers can forward); it returns
// the leader's index.
func (gr *group) waitLeader() int { return gr.waitLeaderExcept(-1) }

// waitLeaderExcept is waitLeader ignoring node skip (a partitioned node,
// which may still believe it leads).
func (gr *group) waitLeaderExcept(skip int) int {
	gr.t.Helper()
	leader := -1
	eventually.True(gr.t, 20*time.Second, "a leader known to every running node", func() bool {
		leader = -1
		for i := range gr.nodes {
			if g := gr.groupOf(i); g != nil && i != skip && g.IsLeader() {
				leader = i
			}
		}
		if leader < 0 {
			return false
		}
		for i := range gr.nodes {
			g := gr.groupOf(i)
			if g == nil || i == skip {
				continue
			}
			if l := g.Leader(); l.LeaderID != gr.nodes[leader].id || l.LeaderHTTPAddr != gr.nodes[leader].httpAddr {
				return false
			}
		}
		return true
	})
	return leader
}

func (gr *group) follower(leader int) int {
	for i := range gr.nodes {
		if i != leader && gr.groupOf(i) != nil {
			return i
		}
	}
	gr.t.Fatal("no running follower")
	return -1
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) rev() uint64 {
	n, _ := strconv.ParseUint(r.header.Get(api.HeaderRevision), 10, 64)
	return n
}

func (r resp) etag() string { return r.header.Get("ETag") }

func do(ctx context.Context, c *http.Client, method, addr, path string, body []byte, hdr map[string]string) (resp, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return resp{}, err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	if err != nil {
		return resp{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, b}, err
}

func (gr *group) must(method string, node int, path string, body []byte, hdr map[string]string, want int) resp {
	gr.t.Helper()
	r, err := do(context.Background(), gr.client, method, gr.nodes[node].httpAddr, path, body, hdr)
	if err != nil {
		gr.t.Fatalf("%s %s on %s: %v", method, path, gr.nodes[node].id, err)
	}
	if r.status != want {
		gr.t.Fatalf("%s %s on %s: status %d, want %d: %s", method, path, gr.nodes[node].id, r.status, want, r.body)
	}
	return r
}

func ifMatch(rev uint64) map[string]string {
	return map[string]string{"If-Match": strconv.FormatUint(rev, 10)}
}

func errCode(t testing.TB, r resp) (code, field string) {
	t.Helper()
	var body struct {
		Error api.ErrBody `json:"error"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatalf("error body %q: %v", r.body, err)
	}
	return body.Error.Code, body.Error.Field
}

func TestCompareAndSetAndForwarding(t *testing.T) {
	gr := newGroup(t, 3)
	leader := gr.waitLeader()
	f := gr.follower(leader)
	leaderID := gr.nodes[leader].id

	// A create-only PUT on a follower is forwarded to the leader.
	r := gr.must("PUT", f, "/v1/cp/locks/a", []byte("v1"), ifMatch(0), http.StatusOK)
	if r.header.Get(api.HeaderForwarded) != leaderID {
		t.Fatalf("follower write not forwarded to %s: %v", leaderID, r.header)
	}
	rev1 := r.rev()
	if rev1 == 0 || r.etag() != strconv.Quote(strconv.FormatUint(rev1, 10)) {
		t.Fatalf("revision %d etag %q", rev1, r.etag())
	}
	// A second create fails: 412 with the current revision.
	r = gr.must("PUT", leader, "/v1/cp/locks/a", []byte("v2"), ifMatch(0), http.StatusPreconditionFailed)
	if code, field := errCode(t, r); code != "revision_conflict" || field != "If-Match" || r.rev() != rev1 {
		t.Fatalf("conflict %s %s rev %d", code, field, r.rev())
	}
	gr.must("PUT", f, "/v1/cp/locks/a", []byte("v2"), ifMatch(rev1+1000), http.StatusPreconditionFailed)
	r = gr.must("PUT", f, "/v1/cp/locks/a", []byte("v2"), ifMatch(rev1), http.StatusOK)
	rev2 := r.rev()
	if rev2 <= rev1 {
		t.Fatalf("revision went from %d to %d", rev1, rev2)
	}
	// Same key in another keyspace is another key.
	gr.must("GET", leader, "/v1/cp/other/a", nil, nil, http.StatusNotFound)
	// A linearizable read on a follower is forwarded and sees the write.
	r = gr.must("GET", f, "/v1/cp/locks/a", nil, nil, http.StatusOK)
	if string(r.body) != "v2" || r.rev() != rev2 || r.header.Get(api.HeaderForwarded) != leaderID {
		t.Fatalf("follower read %q rev %d forwarded %q", r.body, r.rev(), r.header.Get(api.HeaderForwarded))
	}
	// A stale read is served locally and converges.
	eventually.True(t, 5*time.Second, "stale read on the follower to see v2", func() bool {
		r := gr.must("GET", f, "/v1/cp/locks/a?stale=true", nil, nil, r.status)
		return string(r.body) == "v2" && r.header.Get(api.HeaderForwarded) == ""
	})
	// Conditional delete.
	gr.must("DELETE", f, "/v1/cp/locks/a", nil, ifMatch(rev1), http.StatusPreconditionFailed)
	r = gr.must("DELETE", f, "/v1/cp/locks/a", nil, ifMatch(rev2), http.StatusOK)
	if r.rev() <= rev2 || r.etag() != `"0"` {
		t.Fatalf("delete rev %d etag %s", r.rev(), r.etag())
	}
	r = gr.must("GET", leader, "/v1/cp/locks/a", nil, nil, http.StatusNotFound)
	if r.etag() != `"0"` {
		t.Fatalf("404 etag %q", r.etag())
	}
	gr.must("DELETE", leader, "/v1/cp/locks/a", nil, nil, http.StatusNotFound)
	// Created again from absent, with a quoted ETag as If-Match.
	gr.must("PUT", leader, "/v1/cp/locks/a", []byte("v3"), map[string]string{"If-Match": `"0"`}, http.StatusOK)

	// Bad input is 400 naming the field and changes nothing.
	for _, tc := range []struct {
		method, path string
		hdr          map[string]string
		field        string
	}{
		{"PUT", "/v1/cp/bad%20space/a", nil, "keyspace"},
		{"PUT", "/v1/cp/leases/a", nil, "keyspace"},
		{"PUT", "/v1/cp/" + strings.Repeat("k", 65) + "/a", nil, "keyspace"},
		{"PUT", "/v1/cp/locks/" + strings.Repeat("x", 257), nil, "key"},
		{"PUT", "/v1/cp/locks/a", map[string]string{"If-Match": "W/\"3\""}, "If-Match"},
		{"DELETE", "/v1/cp/locks/a", map[string]string{"If-Match": "-1"}, "If-Match"},
		{"GET", "/v1/cp/locks/a?stale=maybe", nil, "stale"},
	} {
		r := gr.must(tc.method, f, tc.path, []byte("zz"), tc.hdr, http.StatusBadRequest)
		if _, field := errCode(t, r); field != tc.field {
			t.Errorf("%s %s: field %q, want %q", tc.method, tc.path, field, tc.field)
		}
	}
	r = gr.must("GET", leader, "/v1/cp/locks/a", nil, nil, http.StatusOK)
	if string(r.body) != "v3" {
		t.Fatalf("bad input changed the value to %q", r.body)
	}

	// Without a quorum there is no leader: 503 with a JSON error, nothing
	// written.
	for i := range gr.nodes {
		if i != f {
			gr.kill(i)
		}
	}
	eventually.True(t, 10*time.Second, "the lone node to answer 503", func() bool {
		r, err := do(context.Background(), gr.client, "PUT", gr.nodes[f].httpAddr, "/v1/cp/locks/b", []byte("x"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.status == http.StatusServiceUnavailable {
			code, _ := errCode(t, r)
			return (code == "no_leader" || code == "not_leader") && r.header.Get("Retry-After") != ""
		}
		return false
	})
	gr.must("GET", f, "/v1/cp/locks/b?stale=true", nil, nil, http.StatusNotFound)
}

// errIsDial reports whether err happened before the request left the
// client (so nothing reached the server).
func errIsDial(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
