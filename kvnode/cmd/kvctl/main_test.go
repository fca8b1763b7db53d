package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlstest"
	"github.com/portico-io/portico/internal/xdstest"
	"github.com/portico-io/portico/kvnode"
	"github.com/portico-io/portico/kvnode/api"
	"github.com/portico-io/portico/kvnode/cp"
	"github.com/portico-io/portico/kvnode/ring"
	"github.com/portico-io/portico/kvnode/storage"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// One pair of clusters carries the day-2 story, to keep the package
// cheap: a backup of cluster a taken under writes restores into a fresh
// cluster b with every write acknowledged before it (ring and consensus
// tier); a node joins b and cleanup on the old nodes drops exactly what
// they no longer replicate; a killed node of b is replaced under writes
// without losing an acknowledged QUORUM write, and stands down when it
// comes back.
func TestDayTwo(t *testing.T) {
	pki := tlstest.New(t)
	a := newCluster(t, pki, "a", 3, true)
	t0 := time.Now()

	// --- backup under writes, restore into a fresh cluster ---
	log := newAcks()
	stop := a.writers(2, "w", log, func() []string { return []string{"a0", "a1", "a2"} })
	log.waitAcks(t, 40)
	revs := map[string]string{}
	for i := range 5 {
		r := a.must("PUT", fmt.Sprintf("a%d", i%3), fmt.Sprintf("/v1/cp/locks/l%d", i), []byte(fmt.Sprintf("lock-%d", i)), http.StatusOK)
		revs[fmt.Sprintf("l%d", i)] = r.header.Get(api.HeaderRevision)
	}
	a.must("DELETE", "a1", "/v1/cp/locks/l4", nil, http.StatusOK)
	before := log.snapshot()
	dir := filepath.Join(t.TempDir(), "backup")
	out := a.kvctl(0, a.addrs("a0", "a1", "a2"), "backup", "save", "--out", dir)
	if !strings.Contains(out, "backup of 3 nodes") || !strings.Contains(out, "consensus tier: snapshot at revision") {
		t.Fatalf("backup save: %s", out)
	}
	log.waitAcks(t, 10) // writes go on after the backup: they may or may not be in it
	stop()
	t.Logf("backup of %d acknowledged writes (%d deleted) taken under writes after %s", before.count(), len(before.deleted), time.Since(t0))
	a.kvctl(1, a.addrs("a0", "a1"), "backup", "save", "--out", filepath.Join(t.TempDir(), "partial"))
	a.kvctl(1, a.addrs("a0", "a1", "a2"), "backup", "save", "--out", dir) // never over a backup
	for _, id := range a.ids() {
		a.kill(id)
	}

	b := newCluster(t, pki, "b", 3, true)
	out = b.kvctl(0, b.addrs("b0", "b1", "b2"), "backup", "restore", "--from", dir)
	if !strings.Contains(out, "consensus tier: snapshot of revision") {
		t.Fatalf("restore: %s", out)
	}
	b.verify(before, []string{"b0", "b1", "b2"})
	for i := range 4 {
		r := b.must("GET", fmt.Sprintf("b%d", i%3), fmt.Sprintf("/v1/cp/locks/l%d", i), nil, http.StatusOK)
		if string(r.body) != fmt.Sprintf("lock-%d", i) || r.header.Get(api.HeaderRevision) != revs[fmt.Sprintf("l%d", i)] {
			t.Fatalf("restored lock l%d = %q at revision %s, want revision %s", i, r.body, r.header.Get(api.HeaderRevision), revs[fmt.Sprintf("l%d", i)])
		}
	}
	b.must("GET", "b2", "/v1/cp/locks/l4", nil, http.StatusNotFound)
	// The restored tier keeps working: writes go on, revisions grow past
	// the restored ones (they are fencing tokens).
	after := b.must("PUT", "b1", "/v1/cp/locks/after", []byte("x"), http.StatusOK)
	if got, _ := strconv.ParseUint(after.header.Get(api.HeaderRevision), 10, 64); got <= maxRev(revs) {
		t.Fatalf("first write after the restore at revision %d, not above the restored %d", got, maxRev(revs))
	}
	t.Logf("restored into a fresh cluster after %s", time.Since(t0))

	// --- cleanup after a join ---
	b.add("b3", kvnode.JoinAuto, nil)
	b.waitNormal("b3")
	old := []string{"b0", "b1", "b2"}
	held := map[string][]storage.Entry{}
	for _, id := range old {
		held[id] = scanAll(t, b.node(id).Store())
	}
	out = b.kvctl(0, b.addrs(old...), "node", "cleanup")
	deleted := 0
	for _, id := range old {
		// Exactly the keys of ranges it no longer replicates are gone:
		// nothing else (the store as it was, minus those).
		cur, _ := b.node(id).Membership().Rings()
		mine := cur.RangesOf(id)
		now := map[string]bool{}
		for _, e := range scanAll(t, b.node(id).Store()) {
			now[string(e.Key)] = true
		}
		for _, e := range held[id] {
			owned := slices.ContainsFunc(mine, func(rg ring.Range) bool { return rg.Contains(e.Token) })
			if owned != now[string(e.Key)] {
				t.Errorf("%s after cleanup: %s present=%v, replicated=%v", id, e.Key, now[string(e.Key)], owned)
			}
			if !owned {
				deleted++
			}
		}
		if len(now) > len(held[id]) {
			t.Errorf("%s holds %d keys after cleanup, %d before", id, len(now), len(held[id]))
		}
	}
	if deleted == 0 {
		t.Fatalf("cleanup deleted nothing after a join: %s", out)
	}
	b.verify(before, []string{"b0", "b1", "b2", "b3"})
	t.Logf("cleanup dropped %d keys, lost none, after %s", deleted, time.Since(t0))

	// --- replace a killed node under writes ---
	log = newAcks()
	coords := []string{"b0", "b2", "b3"}
	stop = b.writers(2, "r", log, func() []string { return coords })
	log.waitAcks(t, 30)
	b.kill("b1")
	b.waitAlive("b1", false)
	log.waitAcks(t, 20)
	// r1 also takes b1's place in the Raft group: it runs the tier,
	// without bootstrap, and kvctl makes it a voter.
	r1Raft := testdeps.FreeAddrs(t, 1)[0]
	r := b.add("r1", kvnode.JoinManual, func(cfg *kvnode.Config) {
		cfg.CPKeyspaces = []string{"locks"}
		cfg.CP = cp.Config{BindAddr: r1Raft}
	})
	xdstest.Eventually(t, 30*time.Second, "r1 to see the ring and b1 down", func() bool {
		cur, _ := r.Membership().Rings()
		_, known := r.Membership().Member("b1")
		return !cur.Empty() && known && !r.Membership().Alive("b1")
	})
	// Refused: a live node, an unknown one, and the wrong target.
	b.kvctl(1, b.addrs("r1"), "node", "replace", "--dead", "b0")
	b.kvctl(1, b.addrs("r1"), "node", "replace", "--dead", "nope")
	b.kvctl(2, b.addrs("r1", "b0"), "node", "replace", "--dead", "b1")
	out = b.kvctl(0, b.addrs("r1"), "node", "replace", "--dead", "b1", "--raft-addr", r1Raft, "--cp-via", b.node("b2").HTTPAddr())
	if !strings.Contains(out, "r1 replaced b1") || !strings.Contains(out, "b1 removed") || !strings.Contains(out, "r1 added as a voter") {
		t.Fatalf("replace: %s", out)
	}
	atReplace := log.snapshot()
	b.waitNormal("r1")
	log.waitAcks(t, 20)
	stop()
	// Before any read (reads repair replicas): the replacement holds, in
	// its own store, every write acknowledged by the time the replace
	// returned that it replicates — streamed, or written to it as the
	// pending owner (a write acked after the flip may still be in flight
	// to it, or hinted: hence the wait).
	xdstest.Eventually(t, 30*time.Second, "r1 to hold every write acknowledged before the replace returned", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		for k, v := range atReplace.values {
			if log.deleted[k] || log.maybe[k] || !slices.Contains(b.replicas("b0", k), "r1") {
				continue
			}
			if recs, err := r.Store().Get([]byte(k)); err != nil || len(recs) != 1 || string(recs[0].Value) != v {
				return false
			}
		}
		return true
	})
	t.Logf("replaced b1 under %d acknowledged writes after %s: %s", log.count(), time.Since(t0), strings.TrimSpace(out))
	oldTokens := b.node("b0").Membership()
	if m, _ := oldTokens.Member("b1"); m.State != kvv1.MemberState_MEMBER_STATE_LEFT {
		t.Fatalf("b1 is %s after its replacement", m.State)
	}
	b.verify(log, []string{"b0", "b2", "b3", "r1"})
	b.verify(before, []string{"r1"})
	// Hints held for b1 while it was down are dropped once it has left.
	xdstest.Eventually(t, 10*time.Second, "no hints left for b1", func() bool {
		for _, id := range b.ids() {
			if b.node(id).Hints().Pending()["b1"] > 0 {
				return false
			}
		}
		return true
	})
	// The consensus tier: r1 votes instead of b1, and follows the log.
	var ms struct {
		Items []cp.Member `json:"items"`
	}
	if err := json.Unmarshal(b.must("GET", "r1", "/admin/v1/cp/members", nil, http.StatusOK).body, &ms); err != nil {
		t.Fatal(err)
	}
	var voters []string
	for _, m := range ms.Items {
		voters = append(voters, m.ID+"/"+m.Suffrage)
	}
	if slices.Sort(voters); strings.Join(voters, ",") != "b0/Voter,b2/Voter,r1/Voter" {
		t.Fatalf("raft members after the replacement: %v", voters)
	}
	b.must("PUT", "r1", "/v1/cp/locks/replaced", []byte("yes"), http.StatusOK)
	xdstest.Eventually(t, 10*time.Second, "r1 to apply the write", func() bool {
		r, err := b.do(nil, "GET", "r1", "/v1/cp/locks/replaced?stale=true", nil)
		return err == nil && r.status == http.StatusOK && string(r.body) == "yes"
	})
	t.Logf("every acknowledged write read back after %s", time.Since(t0))

	// b1 restarted with its data stands down: r1 keeps its tokens.
	b.mu.Lock()
	cfg := b.cfgs["b1"]
	b.mu.Unlock()
	back := b.start(cfg)
	xdstest.Eventually(t, 30*time.Second, "b1 to stand down", func() bool {
		return back.Membership().Self().State == kvv1.MemberState_MEMBER_STATE_LEFT
	})
	t.Logf("b1 stood down after %s", time.Since(t0))
	cur, _ := b.node("b0").Membership().Rings()
	if _, ok := cur.Node("b1"); ok {
		t.Fatal("b1 is back in the ring after its replacement")
	}
	b.verify(log, []string{"b0", "r1"})
}

// Every day-2 route refuses a caller without credentials (401) and one
// whose role lacks cluster.admin (403), by certificate or token.
func TestDayTwoRoutesNeedClusterAdmin(t *testing.T) {
	pki := tlstest.New(t)
	c := newCluster(t, pki, "g", 3, true)
	cn, err := tls.LoadX509KeyPair(pki.Files(t, identity.CacheNode, "cache-0").CertFile, pki.Files(t, identity.CacheNode, "cache-0").KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	noCert := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: pki.ClientTLS(nil)}}
	cacheCert := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: pki.ClientTLS([]tls.Certificate{cn})}}
	callers := map[string]struct {
		hc   *http.Client
		want int
	}{
		"no credential":     {noCert, http.StatusUnauthorized},
		"cachenode cert":    {cacheCert, http.StatusForbidden},
		"viewer token":      {&http.Client{Timeout: 10 * time.Second, Transport: bearerTransport{noCert.Transport, tokens.Token(authz.Viewer)}}, http.StatusForbidden},
		"editor token":      {&http.Client{Timeout: 10 * time.Second, Transport: bearerTransport{noCert.Transport, tokens.Token(authz.Editor)}}, http.StatusForbidden},
		"security-admin tk": {&http.Client{Timeout: 10 * time.Second, Transport: bearerTransport{noCert.Transport, tokens.Token(authz.SecurityAdmin)}}, http.StatusForbidden},
	}
	routes := []string{"/admin/v1/backup", "/admin/v1/restore", "/admin/v1/cleanup", "/admin/v1/replace", "/admin/v1/cp/snapshot", "/admin/v1/cp/restore"}
	for name, cl := range callers {
		for _, path := range routes {
			r, err := c.do(cl.hc, "POST", "g0", path, []byte(`{"node":"g1"}`))
			if err != nil {
				t.Fatalf("%s %s: %v", name, path, err)
			}
			if r.status != cl.want {
				t.Errorf("%s POST %s: %d, want %d: %s", name, path, r.status, cl.want, r.body)
			}
		}
	}
	// The same routes serve an admin: cleanup on a NORMAL node, and a
	// refused replacement (g1 is alive) rather than a refused caller.
	c.must("POST", "g0", "/admin/v1/cleanup", nil, http.StatusOK)
	c.must("POST", "g0", "/admin/v1/replace", []byte(`{"node":"g1"}`), http.StatusConflict)
	c.must("POST", "g0", "/admin/v1/replace", []byte(`{"nod":"g1"}`), http.StatusBadRequest)
	c.must("POST", "g0", "/admin/v1/cp/restore", []byte("not a snapshot"), http.StatusBadRequest)
	c.must("POST", "g0", "/admin/v1/restore", []byte{0x05, 1, 2}, http.StatusBadRequest)
}

func maxRev(revs map[string]string) uint64 {
	var m uint64
	for _, r := range revs {
		n, _ := strconv.ParseUint(r, 10, 64)
		m = max(m, n)
	}
	return m
}

// Bad command lines exit 2 before calling anything.
func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"backup"},
		{"backup", "frobnicate"},
		{"--insecure-plaintext", "backup", "save"},
		{"--insecure-plaintext", "backup", "restore"},
		{"--insecure-plaintext", "node", "cleanup", "extra"},
		{"--insecure-plaintext", "node", "replace"},
		{"--insecure-plaintext", "node", "replace", "--dead", "x", "--raft-addr", "h:1"},
		{"backup", "save", "--out", "x"}, // neither TLS files nor --insecure-plaintext
	} {
		var out, errb bytes.Buffer
		if code := run(t.Context(), args, &out, &errb); code != 2 {
			t.Errorf("kvctl %v = %d, want 2: %s%s", args, code, out.String(), errb.String())
		}
	}
}

// scanAll lists every key of a node's store (tombstones included).
func scanAll(t *testing.T, st *storage.Store) []storage.Entry {
	t.Helper()
	var out []storage.Entry
	if err := st.Scan(ring.Range{}, nil, time.Time{}, func(e storage.Entry) bool {
		out = append(out, e)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}
