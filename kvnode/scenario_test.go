package kvnode

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

func TestVectorClockSiblingsAndMergedContext(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.VClockKeyspaces = []string{"cart"} })
	// Two clients write blind, concurrently, through different coordinators.
	c.mustDo("PUT", "n0", "/v1/kv/cart:42?consistency=ALL", []byte("apple"), nil, http.StatusOK)
	c.mustDo("PUT", "n1", "/v1/kv/cart:42?consistency=ALL", []byte("pear"), nil, http.StatusOK)
	r := c.mustDo("GET", "n2", "/v1/kv/cart:42", nil, nil, http.StatusMultipleChoices)
	var body struct{ Siblings []struct{ Value []byte } }
	if err := json.Unmarshal(r.body, &body); err != nil || len(body.Siblings) != 2 {
		t.Fatalf("siblings: %s (%v)", r.body, err)
	}
	got := []string{string(body.Siblings[0].Value), string(body.Siblings[1].Value)}
	slices.Sort(got)
	if !slices.Equal(got, []string{"apple", "pear"}) {
		t.Fatalf("siblings = %v", got)
	}
	ctx := r.header.Get("X-KV-Context")
	if ctx == "" || r.header.Get("X-KV-Siblings") != "2" {
		t.Fatalf("context %q siblings %q", ctx, r.header.Get("X-KV-Siblings"))
	}
	// A write with the merged context resolves them.
	c.mustDo("PUT", "n2", "/v1/kv/cart:42?consistency=ALL", []byte("apple,pear"), map[string]string{"X-KV-Context": ctx}, http.StatusOK)
	r = c.mustDo("GET", "n0", "/v1/kv/cart:42?consistency=ALL", nil, nil, http.StatusOK)
	if string(r.body) != "apple,pear" {
		t.Fatalf("after resolving write: %q", r.body)
	}
	// A write with a stale context (from before the resolve) is concurrent
	// with the resolved value, so both are kept.
	c.mustDo("PUT", "n1", "/v1/kv/cart:42?consistency=ALL", []byte("stale"), map[string]string{"X-KV-Context": ctx}, http.StatusOK)
	c.mustDo("GET", "n0", "/v1/kv/cart:42?consistency=ALL", nil, nil, http.StatusMultipleChoices)
	// LWW keyspaces never return siblings.
	c.mustDo("PUT", "n0", "/v1/kv/profile:1", []byte("a"), nil, http.StatusOK)
	c.mustDo("PUT", "n1", "/v1/kv/profile:1", []byte("b"), nil, http.StatusOK)
	if r := c.mustDo("GET", "n2", "/v1/kv/profile:1?consistency=ALL", nil, nil, http.StatusOK); string(r.body) != "b" {
		t.Fatalf("LWW = %q", r.body)
	}
}

// A delete missed by a replica whose hints expired must not come back: a
// repair inside the grace period spreads the tombstone, and after the grace
// every replica purges the key together.
func TestDeletedKeyNeverComesBack(t *testing.T) {
	c := newCluster(t, 5, func(cfg *Config) { cfg.TombstoneGrace = 24 * time.Hour; cfg.RepairInterval = 12 * time.Hour })
	key := "zombie:1"
	c.mustDo("PUT", "n0", "/v1/kv/"+key+"?consistency=ALL", []byte("brains"), nil, http.StatusOK)
	reps := c.replicas("n0", key)
	down := reps[0]
	var up []string
	for _, id := range c.ids() {
		if id != down {
			up = append(up, id)
		}
	}
	t0 := time.Now()
	c.kill(down)
	c.waitAlive(down, false, up...)
	t.Logf("down detected after %s", time.Since(t0))
	c.mustDo("DELETE", up[0], "/v1/kv/"+key+"?consistency=QUORUM", nil, nil, http.StatusNoContent)
	c.clock.Advance(4 * time.Hour) // the hint for the down replica expires
	c.waitUntil("hints expired", 20*time.Second, func() bool { return c.hintsPending() == 0 })
	t.Logf("hints expired after %s", time.Since(t0))
	c.start(down)
	c.waitAlive(down, true, up...)
	t.Logf("back up after %s", time.Since(t0))
	if v, ok := c.localValue(down, key); !ok || v != "brains" {
		t.Fatalf("setup: returned replica should still hold the old value, has %q %v", v, ok)
	}
	// Anti-entropy from another replica (no read touches the key).
	if res := c.node(reps[1]).Repairer().RepairAll(c.ctx); res.Failed != 0 {
		t.Fatalf("repair: %+v", res)
	}
	t.Logf("repaired after %s", time.Since(t0))
	recs, _ := c.node(down).Store().Get([]byte(key))
	if len(recs) != 1 || !recs[0].Tombstone {
		t.Fatalf("returned replica after repair: %v, want the tombstone", recs)
	}
	for _, id := range c.ids() {
		c.mustDo("GET", id, "/v1/kv/"+key+"?consistency=ALL", nil, nil, http.StatusNotFound)
	}
	// Past the grace period every replica purges; repairs stream nothing back.
	c.clock.Advance(25 * time.Hour)
	for _, id := range c.ids() {
		if res := c.node(id).Repairer().RepairAll(c.ctx); res.Failed != 0 {
			t.Fatalf("repair on %s: %+v", id, res)
		}
	}
	for _, id := range reps {
		if recs, _ := c.node(id).Store().Get([]byte(key)); recs != nil {
			t.Fatalf("%s still holds %v after the grace period", id, recs)
		}
	}
	for _, id := range c.ids() {
		c.mustDo("GET", id, "/v1/kv/"+key+"?consistency=ALL", nil, nil, http.StatusNotFound)
	}
}

// ackLog records acknowledged writes from concurrent clients.
type ackLog struct {
	mu      sync.Mutex
	values  map[string]string
	deleted map[string]bool
	// maybeDeleted: a DELETE whose outcome is unknown (the client timed
	// out, or 504): the key may read back as its value or as absent.
	maybeDeleted map[string]bool
	count        int
	notify       chan struct{}
}

func newAckLog() *ackLog {
	return &ackLog{values: map[string]string{}, deleted: map[string]bool{}, maybeDeleted: map[string]bool{}, notify: make(chan struct{}, 1)}
}

func (a *ackLog) put(k, v string) {
	a.mu.Lock()
	a.values[k] = v
	a.count++
	a.mu.Unlock()
	select {
	case a.notify <- struct{}{}:
	default:
	}
}

func (a *ackLog) del(k string) {
	a.mu.Lock()
	a.deleted[k] = true
	a.mu.Unlock()
}

func (a *ackLog) maybeDel(k string) {
	a.mu.Lock()
	a.maybeDeleted[k] = true
	a.mu.Unlock()
}

func (a *ackLog) acked() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.count
}

// waitAcks blocks until n more writes were acknowledged.
func (a *ackLog) waitAcks(t *testing.T, n int) {
	t.Helper()
	target := a.acked() + n
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	for a.acked() < target {
		select {
		case <-a.notify:
		case <-deadline.C:
			t.Fatalf("no progress: %d acked, waiting for %d", a.acked(), target)
		}
	}
}

// writer puts distinct keys at QUORUM through random coordinators until
// stop closes; every 7th acknowledged key is then deleted.
func (c *cluster) writer(w int, log *ackLog, stop <-chan struct{}, nodes func() []string, wg *sync.WaitGroup) {
	defer wg.Done()
	r := rand.New(rand.NewPCG(uint64(w), 7))
	client := adminClient(1500 * time.Millisecond)
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		ids := nodes()
		id := ids[r.IntN(len(ids))]
		key, val := fmt.Sprintf("w%d:%d", w, i), fmt.Sprintf("v%d-%d", w, i)
		req, _ := http.NewRequestWithContext(c.ctx, "PUT", c.url(id, "/v1/kv/"+key+"?consistency=QUORUM"), stringsReader(val))
		resp, err := client.Do(req)
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			continue
		}
		log.put(key, val)
		if i%7 == 0 {
			req, _ := http.NewRequestWithContext(c.ctx, "DELETE", c.url(id, "/v1/kv/"+key+"?consistency=QUORUM"), nil)
			resp, err := client.Do(req)
			switch {
			case err != nil:
				// Timed out or cut: the delete may have landed.
				log.maybeDel(key)
			case resp.StatusCode == http.StatusNoContent:
				log.del(key)
			case resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode < 500:
				// Nothing was written.
			default:
				log.maybeDel(key) // 504: attempted, outcome unknown
			}
			if err == nil {
				resp.Body.Close()
			}
		}
	}
}

// verify reads every acknowledged key at QUORUM: zero lost writes, and no
// acknowledged delete undone.
func (c *cluster) verify(t *testing.T, log *ackLog, via []string) {
	t.Helper()
	log.mu.Lock()
	defer log.mu.Unlock()
	i := 0
	for k, v := range log.values {
		id := via[i%len(via)]
		i++
		r, err := c.do("GET", id, "/v1/kv/"+k+"?consistency=QUORUM", nil, nil)
		if err != nil {
			t.Fatalf("read %s: %v", k, err)
		}
		if log.deleted[k] {
			if r.status != http.StatusNotFound {
				t.Fatalf("deleted %s came back: %d %q", k, r.status, r.body)
			}
			continue
		}
		if log.maybeDeleted[k] && r.status == http.StatusNotFound {
			continue
		}
		if r.status != http.StatusOK || string(r.body) != v {
			t.Fatalf("acknowledged %s=%s read back as %d %q", k, v, r.status, r.body)
		}
	}
}

func TestFaultInjectionLosesNoAcknowledgedWrite(t *testing.T) {
	c := newCluster(t, 5, func(cfg *Config) { cfg.WriteTimeout = 500 * time.Millisecond })
	log := newAckLog()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	all := c.ids()
	for w := range 3 {
		wg.Add(1)
		go c.writer(w, log, stop, func() []string { return all }, &wg)
	}
	r := rand.New(rand.NewPCG(42, 42))
	log.waitAcks(t, 30)
	for round := range 4 {
		victim := all[r.IntN(len(all))]
		if round%2 == 0 {
			c.kill(victim)
			log.waitAcks(t, 25)
			c.start(victim)
		} else {
			c.node(victim).Pause(true)
			log.waitAcks(t, 25)
			c.node(victim).Pause(false)
		}
		for _, id := range all {
			c.waitAlive(id, true, all...)
		}
		log.waitAcks(t, 10)
	}
	close(stop)
	wg.Wait()
	if log.acked() < 150 {
		t.Fatalf("only %d writes acknowledged", log.acked())
	}
	c.verify(t, log, all)
	t.Logf("%d acknowledged writes, %d deletes, all read back at QUORUM", log.acked(), len(log.deleted))
	// Once hints drain, every replica holds every surviving key: check via ALL.
	c.waitUntil("hints drained", 30*time.Second, func() bool { return c.hintsPending() == 0 })
	for k := range log.values {
		if log.deleted[k] || log.maybeDeleted[k] {
			continue
		}
		c.mustDo("GET", all[0], "/v1/kv/"+k+"?consistency=ALL", nil, nil, http.StatusOK)
	}
}

func TestJoinAndDecommissionUnderLoad(t *testing.T) {
	c := newCluster(t, 4, nil)
	log := newAckLog()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var coordMu sync.Mutex
	coords := c.ids()
	nodes := func() []string {
		coordMu.Lock()
		defer coordMu.Unlock()
		return slices.Clone(coords)
	}
	for w := range 2 {
		wg.Add(1)
		go c.writer(w, log, stop, nodes, &wg)
	}
	t0 := time.Now()
	log.waitAcks(t, 60)
	t.Logf("100 acks after %s", time.Since(t0))
	c.add("n4", JoinManual)
	c.waitUntil("n4 known to n0", 20*time.Second, func() bool { _, ok := c.node("n0").Membership().Member("n4"); return ok })
	// Gossip runs both ways; join needs n4 to have heard the ring (else 409,
	// which an operator would retry).
	c.waitUntil("n4 to see the ring", 20*time.Second, func() bool { cur, _ := c.node("n4").Membership().Rings(); return !cur.Empty() })
	c.mustDo("GET", "n4", "/readyz", nil, nil, http.StatusServiceUnavailable)
	if cur, _ := c.node("n0").Membership().Rings(); len(cur.Nodes()) != 4 {
		t.Fatal("a manual-join node entered the ring before POST /admin/v1/join")
	}
	c.mustDo("POST", "n4", "/admin/v1/join", nil, nil, http.StatusOK)
	c.waitNormal("n4")
	c.mustDo("GET", "n4", "/readyz", nil, nil, http.StatusOK)
	t.Logf("joined after %s", time.Since(t0))
	coordMu.Lock()
	coords = append(coords, "n4")
	coordMu.Unlock()
	checkBalance(t, c, "n0", 5)
	log.waitAcks(t, 60)
	t.Logf("200 acks after %s", time.Since(t0))
	c.mustDo("POST", "n1", "/admin/v1/decommission", nil, nil, http.StatusOK)
	t.Logf("decommission took %s", time.Since(t0))
	c.waitUntil("n1 LEFT everywhere", 60*time.Second, func() bool {
		for _, id := range c.ids() {
			if m, ok := c.node(id).Membership().Member("n1"); !ok || m.State != kvv1.MemberState_MEMBER_STATE_LEFT {
				return false
			}
		}
		return true
	})
	log.waitAcks(t, 60)
	close(stop)
	wg.Wait()
	t.Logf("writers done after %s", time.Since(t0))
	checkBalance(t, c, "n0", 4)

	// n1 is out of the ring; stop it so nothing can be served from it.
	c.kill("n1")
	rest := []string{"n0", "n2", "n3", "n4"}
	for _, id := range rest {
		c.waitAlive("n1", false, id)
	}
	t.Logf("verify from %s", time.Since(t0))
	c.verify(t, log, rest)
	t.Logf("%d acknowledged writes across a join and a decommission", log.acked())
}

func checkBalance(t *testing.T, c *cluster, via string, size int) {
	t.Helper()
	cur, _ := c.node(via).Membership().Rings()
	own := cur.Ownership()
	if len(own) != size {
		t.Fatalf("ring has %d nodes, want %d", len(own), size)
	}
	ideal := 1 / float64(size)
	for id, o := range own {
		if math.Abs(o-ideal)/ideal > 0.15 {
			t.Fatalf("%s owns %.3f, ideal %.3f ±15%%: %v", id, o, ideal, own)
		}
	}
}

func stringsReader(s string) *stringReader { return &stringReader{s: s} }

type stringReader struct {
	s string
	i int
}

func (r *stringReader) Read(p []byte) (int, error) {
	if r.i >= len(r.s) {
		return 0, io.EOF
	}
	n := copy(p, r.s[r.i:])
	r.i += n
	return n, nil
}
