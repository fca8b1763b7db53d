package kvnode

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/eventually"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/kvnode/api"
	"github.com/portico-io/portico/kvnode/cp"
)

// newCPCluster is a 3-node ring whose nodes also form one Raft group (every
// node bootstraps with the same voters, as make run does) and declare cpKS
// as CP keyspaces. It returns once every node knows the Raft leader.
func newCPCluster(t *testing.T, cpKS ...string) *cluster {
	t.Helper()
	return newCPClusterWith(t, nil, cpKS...)
}

// newCPClusterWith is newCPCluster with tweak applied to every node's config.
func newCPClusterWith(t *testing.T, tweak func(*Config), cpKS ...string) *cluster {
	t.Helper()
	raftAddrs := testdeps.FreeAddrs(t, 3)
	var peers []cp.Peer
	for i, a := range raftAddrs {
		peers = append(peers, cp.Peer{ID: fmt.Sprintf("n%d", i), Addr: a})
	}
	c := newCluster(t, 3, func(cfg *Config) {
		i, _ := strconv.Atoi(strings.TrimPrefix(cfg.NodeID, "n"))
		cfg.CPKeyspaces = cpKS
		cfg.VClockKeyspaces = []string{"vc"}
		// The default Raft timeouts: the ring's tests share the machine,
		// and shorter ones churn elections under the race detector.
		cfg.CP = cp.Config{BindAddr: raftAddrs[i], Bootstrap: true, Peers: peers}
		if tweak != nil {
			tweak(cfg)
		}
	})
	c.cpLeader()
	return c
}

// cpLeader waits until a node leads the Raft group and every node knows
// its HTTP address (so followers forward), and returns its id.
func (c *cluster) cpLeader() string {
	c.t.Helper()
	leader := ""
	// Raft elections have no signal to wait on: poll.
	eventually.True(c.t, 20*time.Second, "a Raft leader known to every node", func() bool {
		leader = ""
		for _, id := range c.ids() {
			if c.node(id).CP().IsLeader() {
				leader = id
			}
		}
		known := leader != ""
		for _, id := range c.ids() {
			if l := c.node(id).CP().Leader(); !known || l.LeaderID != leader || l.LeaderHTTPAddr != c.node(leader).HTTPAddr() {
				known = false
			}
		}
		return known
	})
	return leader
}

// cpDo is mustDo for a request the Raft group serves: a 503 (no leader,
// e.g. an election on the loaded test machine; nothing was written) is
// retried once every node knows a leader again, as a client would.
func (c *cluster) cpDo(method, id, path string, body []byte, hdr map[string]string, want int) httpResult {
	c.t.Helper()
	for attempt := 1; ; attempt++ {
		r, err := c.do(method, id, path, body, hdr)
		if err != nil {
			c.t.Fatalf("%s %s on %s: %v", method, path, id, err)
		}
		if r.status == http.StatusServiceUnavailable && want != r.status && attempt < 5 {
			c.cpLeader()
			continue
		}
		if r.status != want {
			c.t.Fatalf("%s %s on %s: status %d, want %d: %s", method, path, id, r.status, want, r.body)
		}
		return r
	}
}

func (r httpResult) rev() uint64 {
	n, _ := strconv.ParseUint(r.header.Get(api.HeaderRevision), 10, 64)
	return n
}

func (r httpResult) errBody(t *testing.T) api.ErrBody {
	t.Helper()
	var e struct{ Error api.ErrBody }
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body %q: %v", r.body, err)
	}
	return e.Error
}

func ifMatch(rev uint64) map[string]string {
	return map[string]string{"If-Match": strconv.FormatUint(rev, 10)}
}

// A keyspace declared CP is served by the Raft group at the same front
// door: /v1/kv/locks:{key} is /v1/cp/locks/{key}, with compare-and-set,
// revisions and linearizable reads, while a ring keyspace on the same
// node still goes to the ring.
func TestCPKeyspaceThroughKV(t *testing.T) {
	c := newCPCluster(t, "locks")
	leader := c.cpLeader()
	follower := "n0"
	if leader == follower {
		follower = "n1"
	}

	// Create-only on a follower: forwarded to the leader, a revision.
	r := c.cpDo("PUT", follower, "/v1/kv/locks:job-7", []byte("owner-a"), ifMatch(0), http.StatusOK)
	rev1 := r.rev()
	if rev1 == 0 || r.header.Get("ETag") != strconv.Quote(strconv.FormatUint(rev1, 10)) {
		t.Fatalf("create: revision %d, headers %v", rev1, r.header)
	}
	if fwd := r.header.Get(api.HeaderForwarded); !c.node(follower).CP().IsLeader() && fwd != c.cpLeader() {
		t.Fatalf("a follower's write forwarded to %q, not the leader", fwd)
	}
	if r.header.Get("X-KV-Acks") != "" {
		t.Fatalf("a CP write answered like the ring: %v", r.header)
	}
	// A second create and a stale If-Match are 412 with the current revision.
	for _, hdr := range []map[string]string{ifMatch(0), ifMatch(rev1 + 1000)} {
		r = c.cpDo("PUT", leader, "/v1/kv/locks:job-7", []byte("owner-b"), hdr, http.StatusPreconditionFailed)
		if e := r.errBody(t); e.Code != "revision_conflict" || e.Field != "If-Match" || r.rev() != rev1 {
			t.Fatalf("conflict: %+v, revision %d, want %d", e, r.rev(), rev1)
		}
	}
	r = c.cpDo("PUT", follower, "/v1/kv/locks:job-7", []byte("owner-b"), map[string]string{"If-Match": r.header.Get("ETag")}, http.StatusOK)
	rev2 := r.rev()
	if rev2 <= rev1 {
		t.Fatalf("revision went from %d to %d", rev1, rev2)
	}
	// The same entry under /v1/cp/, and the other way round.
	r = c.cpDo("GET", "n2", "/v1/cp/locks/job-7", nil, nil, http.StatusOK)
	if string(r.body) != "owner-b" || r.rev() != rev2 {
		t.Fatalf("/v1/cp/ read %q at %d, want owner-b at %d", r.body, r.rev(), rev2)
	}
	r = c.cpDo("PUT", "n2", "/v1/cp/locks/job-7", []byte("owner-c"), ifMatch(rev2), http.StatusOK)
	rev3 := r.rev()

	// Linearizable reads through /v1/kv/: a write acknowledged by one node
	// is seen by the next read on any other node.
	ids := c.ids()
	for i := range 9 {
		w, rd := ids[i%3], ids[(i+1)%3]
		v := fmt.Sprintf("v%d", i)
		rev := c.cpDo("PUT", w, "/v1/kv/locks:lin", []byte(v), nil, http.StatusOK).rev()
		r = c.cpDo("GET", rd, "/v1/kv/locks:lin", nil, nil, http.StatusOK)
		if string(r.body) != v || r.rev() != rev {
			t.Fatalf("read on %s after a write on %s: %q at %d, want %q at %d", rd, w, r.body, r.rev(), v, rev)
		}
	}
	// A stale read is served locally (not forwarded) and converges.
	// A follower applying has no signal to wait on: poll.
	eventually.True(t, 5*time.Second, "the stale read on the follower to see owner-c", func() bool {
		r = c.cpDo("GET", follower, "/v1/kv/locks:job-7?stale=true", nil, nil, http.StatusOK)
		if r.header.Get(api.HeaderForwarded) != "" {
			t.Fatalf("stale read forwarded: %v", r.header)
		}
		return string(r.body) == "owner-c" && r.rev() == rev3
	})
	// Conditional delete: 412 on a stale revision, then 200 with ETag "0".
	c.cpDo("DELETE", follower, "/v1/kv/locks:job-7", nil, ifMatch(rev2), http.StatusPreconditionFailed)
	r = c.cpDo("DELETE", follower, "/v1/kv/locks:job-7", nil, ifMatch(rev3), http.StatusOK)
	if r.rev() <= rev3 || r.header.Get("ETag") != `"0"` {
		t.Fatalf("delete: revision %d, ETag %s", r.rev(), r.header.Get("ETag"))
	}
	r = c.cpDo("GET", "n2", "/v1/kv/locks:job-7", nil, nil, http.StatusNotFound)
	if r.header.Get("ETag") != `"0"` {
		t.Fatalf("404 ETag %q", r.header.Get("ETag"))
	}

	// A ring keyspace on the same nodes is still the ring.
	r = c.mustDo("PUT", follower, "/v1/kv/cart:1?consistency=ALL", []byte("apples"), nil, http.StatusOK)
	if r.header.Get("X-KV-Acks") != "3/3" || r.header.Get("ETag") != "" {
		t.Fatalf("ring write headers %v", r.header)
	}
	if v, ok := c.localValue(c.replicas(follower, "cart:1")[0], "cart:1"); !ok || v != "apples" {
		t.Fatalf("ring write not in a replica's store: %q %v", v, ok)
	}
	r = c.mustDo("GET", leader, "/v1/kv/cart:1?consistency=QUORUM", nil, nil, http.StatusOK)
	if string(r.body) != "apples" || r.header.Get("X-KV-Acks") == "" {
		t.Fatalf("ring read %q %v", r.body, r.header)
	}
	c.mustDo("DELETE", leader, "/v1/kv/cart:1", nil, nil, http.StatusNoContent)
	// The CP keys never touched the ring's storage.
	for _, id := range ids {
		if v, ok := c.localValue(id, "locks:lin"); ok {
			t.Fatalf("CP key stored in %s's ring store: %q", id, v)
		}
	}

	// Each side refuses the other's options, naming the field; a keyspace
	// not declared CP is 404 under /v1/cp/.
	for _, tc := range []struct {
		method, path string
		hdr          map[string]string
		status       int
		code, field  string
	}{
		{"GET", "/v1/kv/locks:a?consistency=ONE", nil, 400, "ring_only", "consistency"},
		{"PUT", "/v1/kv/locks:a?ttl=60", nil, 400, "ring_only", "ttl"},
		{"PUT", "/v1/kv/locks:a", map[string]string{"X-KV-Context": "AAAA"}, 400, "ring_only", "X-KV-Context"},
		{"DELETE", "/v1/kv/locks:a", map[string]string{"Idempotency-Key": "k1"}, 400, "ring_only", "Idempotency-Key"},
		{"PUT", "/v1/kv/locks", nil, 400, "invalid_key", "key"},
		{"PUT", "/v1/kv/locks:", nil, 400, "invalid_key", "key"},
		{"PUT", "/v1/kv/locks:a", map[string]string{"If-Match": "x"}, 400, "invalid_if_match", "If-Match"},
		{"PUT", "/v1/kv/cart:1", ifMatch(0), 400, "cp_only", "If-Match"},
		{"DELETE", "/v1/kv/cart:1", ifMatch(3), 400, "cp_only", "If-Match"},
		{"GET", "/v1/kv/cart:1?stale=true", nil, 400, "cp_only", "stale"},
		{"PUT", "/v1/kv/cart:1?lease=1", nil, 400, "cp_only", "lease"},
		{"PUT", "/v1/cp/cart/1", nil, 404, "keyspace_not_cp", "keyspace"},
		{"GET", "/v1/cp/vc/1", nil, 404, "keyspace_not_cp", "keyspace"},
		{"GET", "/v1/cp/cart?watch=true", nil, 404, "keyspace_not_cp", "keyspace"},
		{"POST", "/v1/kv:batchGet", nil, 400, "cp_keyspace", "keys[1]"},
		{"POST", "/v1/cp:txn", nil, 400, "keyspace_not_cp", "ops[1].keyspace"},
	} {
		body := []byte("x")
		switch tc.path {
		case "/v1/kv:batchGet":
			body = []byte(`{"keys":["cart:1","locks:a"]}`)
		case "/v1/cp:txn":
			body = []byte(`{"ops":[{"op":"put","keyspace":"locks","key":"a"},{"op":"put","keyspace":"cart","key":"a"}]}`)
		}
		r := c.mustDo(tc.method, follower, tc.path, body, tc.hdr, tc.status)
		if e := r.errBody(t); e.Code != tc.code || e.Field != tc.field {
			t.Errorf("%s %s: %+v, want code %s field %s", tc.method, tc.path, e, tc.code, tc.field)
		} else if tc.code == "keyspace_not_cp" && !strings.Contains(e.Message, "--cp-keyspaces") {
			t.Errorf("%s %s: message %q does not name the flag", tc.method, tc.path, e.Message)
		}
	}
	// None of the refused requests wrote anything.
	c.cpDo("GET", leader, "/v1/kv/locks:a", nil, nil, http.StatusNotFound)
	c.mustDo("GET", leader, "/v1/kv/cart:1?consistency=ALL", nil, nil, http.StatusNotFound)
}

func TestCPKeyspaceConfig(t *testing.T) {
	const on, off = "127.0.0.1:0", ""
	for _, tc := range []struct {
		name       string
		cp, vclock []string
		raftAddr   string
		errHas     string // "" = valid
	}{
		{"valid", []string{"locks", "leader.election"}, []string{"carts"}, on, ""},
		{"none, tier off", nil, nil, off, ""},
		{"both vclock and CP", []string{"locks", "carts"}, []string{"carts"}, on, `keyspace "carts" is declared both vector-clock (--vclock-keyspaces) and CP (--cp-keyspaces)`},
		{"reserved", []string{"leases"}, nil, on, `"leases" (--cp-keyspaces): keyspace "leases" is reserved`},
		{"reserved for tokens", []string{"locks", "__tokens"}, nil, on, `"__tokens" (--cp-keyspaces): keyspace "__tokens" is reserved for kvnode's API tokens`},
		{"bad name", []string{"a:b"}, nil, on, `CP keyspace "a:b" (--cp-keyspaces): keyspace "a:b": only letters`},
		{"too long", []string{strings.Repeat("k", 65)}, nil, on, "must be 1-64 bytes"},
		{"tier off", []string{"locks"}, nil, off, "need the consensus tier, which is off"},
	} {
		cfg := Config{NodeID: "n0", DataDir: t.TempDir(), CPKeyspaces: tc.cp, VClockKeyspaces: tc.vclock, CP: cp.Config{BindAddr: tc.raftAddr},
			InsecurePlaintext: true}
		err := cfg.setDefaults()
		switch {
		case tc.errHas == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.errHas)
		}
	}
}
