package repl

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/portico-io/portico/cachenode/keyspace"
)

const t0 = int64(1_700_000_000_000)

func newClock() *testClock {
	c := &testClock{}
	c.ms.Store(t0)
	return c
}

// fill writes one key of every kind, with and without TTLs, into ns.
func fill(t *testing.T, n *node, ns, prefix string) {
	n.write(t, ns, prefix+"str", func(tx *keyspace.Txn, k []byte) { tx.SetString(k, []byte("v"), 0) })
	n.write(t, ns, prefix+"empty", func(tx *keyspace.Txn, k []byte) { tx.SetString(k, nil, t0+60_000) })
	n.write(t, ns, prefix+"bin\x00\xff", func(tx *keyspace.Txn, k []byte) { tx.SetString(k, []byte{0, 1, 2}, 0) })
	n.write(t, ns, prefix+"big", func(tx *keyspace.Txn, k []byte) { tx.SetString(k, make([]byte, 300<<10), 0) })
	n.write(t, ns, prefix+"list", func(tx *keyspace.Txn, k []byte) {
		e := tx.SetObject(k, keyspace.NewList(), t0+30_000)
		for i := range 50 {
			e.Obj.PushBack(fmt.Appendf(nil, "item%d", i))
		}
		tx.Update(k, e)
	})
	n.write(t, ns, prefix+"set", func(tx *keyspace.Txn, k []byte) {
		e := tx.SetObject(k, keyspace.NewSet(), 0)
		for i := range 50 {
			e.Obj.SetAdd(fmt.Appendf(nil, "m%d", i))
		}
		tx.Update(k, e)
	})
	n.write(t, ns, prefix+"hash", func(tx *keyspace.Txn, k []byte) {
		e := tx.SetObject(k, keyspace.NewHash(), t0+1)
		e.Obj.HashSet([]byte("f"), []byte("v"))
		e.Obj.HashSet([]byte("g"), nil)
		tx.Update(k, e)
	})
	n.write(t, ns, prefix+"zset", func(tx *keyspace.Txn, k []byte) {
		e := tx.SetObject(k, keyspace.NewZset(), t0+40_000)
		for i := range 300 { // past Redis's listpack size
			e.Obj.Zset.Set(fmt.Appendf(nil, "z%d", i), float64(i%7)-1.5)
		}
		e.Obj.Zset.Set([]byte("top"), math.Inf(1))
		tx.Update(k, e)
	})
	for i := range 200 {
		n.write(t, ns, fmt.Sprintf("%sk%d", prefix, i), func(tx *keyspace.Txn, k []byte) { tx.SetString(k, k, 0) })
	}
}

// TestFullSyncThenStream: a replica full-syncs every kind and TTL from two
// namespaces, then follows writes, deletes, TTL changes, expiry (lazy and
// active), eviction and flushes.
func TestFullSyncThenStream(t *testing.T) {
	clk := newClock()
	p := newNode(t, clk, nodeOpts{secret: "bus-secret"}, "a", "b")
	r := newNode(t, clk, nodeOpts{secret: "bus-secret"}, "a", "b")
	fill(t, p, "a", "")
	fill(t, p, "b", "x:")
	r.write(t, "a", "stale", func(tx *keyspace.Txn, k []byte) { tx.SetString(k, k, 0) }) // gone after the full sync

	r.fol.Follow(t.Context(), p.bus)
	r.waitSynced(t, true)
	r.waitCaughtUp(t, p)
	sameState(t, p, r)
	if got := r.state()["a/list"]; !strings.Contains(got, fmt.Sprintf("exp=%d", t0+30_000)) {
		t.Fatalf("TTL not replicated: %s", got)
	}

	p.write(t, "a", "str", func(tx *keyspace.Txn, k []byte) { tx.SetString(k, []byte("v2"), t0+5_000) })
	p.write(t, "a", "list", func(tx *keyspace.Txn, k []byte) {
		e := tx.Get(k)
		e.Obj.PopFront()
		e.Obj.PushBack([]byte("tail"))
		tx.Update(k, e)
	})
	p.write(t, "a", "set", func(tx *keyspace.Txn, k []byte) { tx.SetExpire(k, tx.Get(k), t0+2_000) })
	p.write(t, "a", "zset", func(tx *keyspace.Txn, k []byte) {
		e := tx.Get(k)
		e.Obj.Zset.RemoveRank(0, 9)
		e.Obj.Zset.Set([]byte("z100"), -100)
		tx.Update(k, e)
	})
	p.write(t, "b", "x:str", func(tx *keyspace.Txn, k []byte) { tx.Delete(k) })
	var tx keyspace.Txn
	keys := [][]byte{[]byte("k1"), []byte("renamed")}
	p.db(t, "a").Begin(&tx, keys)
	tx.Rename(keys[0], keys[1], tx.Get(keys[0]))
	tx.End()
	r.waitCaughtUp(t, p)
	sameState(t, p, r)

	// Expiry: the replica's clock has passed too, but the deletes must come
	// from the primary's expiry (lazy for hash, active for the rest).
	clk.ms.Add(3_000)
	p.write(t, "a", "hash", func(tx *keyspace.Txn, k []byte) { tx.Get(k) })
	for i := range p.db(t, "b").NumShards() {
		p.db(t, "b").ExpireSample(i, 100)
		p.db(t, "a").ExpireSample(i, 100)
	}
	r.waitCaughtUp(t, p)
	st := r.state()
	for _, k := range []string{"a/hash", "a/set", "b/x:hash"} {
		if _, ok := st[k]; ok {
			t.Errorf("%s expired on the primary but is still on the replica", k)
		}
	}
	sameState(t, p, r)

	// Eviction.
	before := p.db(t, "a").Len()
	for range 20 {
		p.db(t, "a").EvictOne(5)
	}
	if p.db(t, "a").Len() >= before {
		t.Fatal("nothing evicted")
	}
	r.waitCaughtUp(t, p)
	sameState(t, p, r)

	p.db(t, "b").Flush()
	p.write(t, "b", "after-flush", func(tx *keyspace.Txn, k []byte) { tx.SetString(k, k, 0) })
	r.waitCaughtUp(t, p)
	sameState(t, p, r)
	if r.db(t, "b").Len() != 1 {
		t.Fatalf("replica b has %d keys after flush", r.db(t, "b").Len())
	}

	// INFO and metrics on both sides.
	info := Info(p.feed, p.prim, nil)
	for _, want := range []string{"role:master\r\n", "connected_slaves:1\r\n", "slave0:ip=127.0.0.1,port=7001,state=online,offset=", "master_replid:"} {
		if !strings.Contains(info, want) {
			t.Errorf("primary INFO lacks %q:\n%s", want, info)
		}
	}
	rinfo := Info(r.feed, r.prim, r.fol)
	replid, _ := p.feed.Position()
	for _, want := range []string{"role:slave\r\n", "master_link_status:up\r\n", "master_replid:" + replid + "\r\n", "master_host:127.0.0.1\r\n"} {
		if !strings.Contains(rinfo, want) {
			t.Errorf("replica INFO lacks %q:\n%s", want, rinfo)
		}
	}
	for _, c := range []struct {
		n      *node
		metric string
		label  string
		want   func(float64) bool
	}{
		{r, "portico_cachenode_repl_link_up", "", func(v float64) bool { return v == 1 }},
		{p, "portico_cachenode_repl_connected_replicas", "", func(v float64) bool { return v == 1 }},
		{p, "portico_cachenode_repl_full_syncs_total", "primary", func(v float64) bool { return v == 1 }},
		{r, "portico_cachenode_repl_full_syncs_total", "replica", func(v float64) bool { return v == 1 }},
		{r, "portico_cachenode_repl_applied_records_total", "", func(v float64) bool { return v >= 400 }},
		{p, "portico_cachenode_repl_offset_bytes", "", func(v float64) bool { return v == float64(p.feed.Offset()) }},
		{p, "portico_cachenode_repl_backlog_bytes", "", func(v float64) bool { return v > 0 }},
		{p, "portico_cachenode_repl_replica_lag_bytes", "127.0.0.1:7001", func(v float64) bool { return v >= 0 }},
	} {
		if v, ok := metric(t, c.n, c.metric, c.label); !ok || !c.want(v) {
			t.Errorf("%s{%s} = %v (found %v)", c.metric, c.label, v, ok)
		}
	}
}

// metric reads a metric's value (the series with label value label, if
// given) from n's registry.
func metric(t *testing.T, n *node, name, label string) (float64, bool) {
	t.Helper()
	mfs, err := n.prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != label) {
				continue
			}
			switch {
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}

// TestPartialResyncAfterDrop: a dropped link reconnects and continues
// from the replica's offset without a snapshot.
func TestPartialResyncAfterDrop(t *testing.T) {
	clk := newClock()
	p := newNode(t, clk, nodeOpts{}, "a")
	r := newNode(t, clk, nodeOpts{}, "a")
	fill(t, p, "a", "")
	px := newProxy(t, p.bus)
	r.fol.Follow(t.Context(), px.addr)
	r.waitSynced(t, true)

	px.cut()
	for i := range 100 {
		p.write(t, "a", fmt.Sprint("during", i), func(tx *keyspace.Txn, k []byte) { tx.SetString(k, k, 0) })
	}
	r.waitSynced(t, false)
	r.waitCaughtUp(t, p)
	sameState(t, p, r)
	if st := r.fol.Status(); st.FullSyncs != 1 || st.PartialSyncs != 1 {
		t.Fatalf("status %+v: want 1 full and 1 partial sync", st)
	}

	// Stop and Follow again also continue.
	r.fol.Stop()
	p.write(t, "a", "while-stopped", func(tx *keyspace.Txn, k []byte) { tx.SetString(k, k, 0) })
	r.fol.Follow(t.Context(), p.bus)
	r.waitSynced(t, false)
	r.waitCaughtUp(t, p)
	sameState(t, p, r)
}

// TestFullResyncWhenBacklogOverflowed: a replica whose offset left the
// backlog while it was away full-syncs again; a promoted primary's new
// replid does the same.
func TestFullResyncWhenBacklogOverflowed(t *testing.T) {
	clk := newClock()
	p := newNode(t, clk, nodeOpts{backlog: 8 << 10}, "a")
	r := newNode(t, clk, nodeOpts{}, "a")
	px := newProxy(t, p.bus)
	r.fol.Follow(t.Context(), px.addr)
	r.waitSynced(t, true)

	px.cut()
	for i := range 100 {
		p.write(t, "a", fmt.Sprint("k", i), func(tx *keyspace.Txn, k []byte) { tx.SetString(k, make([]byte, 200), 0) })
	}
	if start, _ := p.feed.Backlog(); start == 0 {
		t.Fatal("backlog did not overflow")
	}
	r.waitSynced(t, true)
	r.waitCaughtUp(t, p)
	sameState(t, p, r)
	if st := r.fol.Status(); st.FullSyncs != 2 {
		t.Fatalf("status %+v: want 2 full syncs", st)
	}

	p.feed.Promote()
	px.cut()
	r.waitSynced(t, true)
	sameState(t, p, r)
}

// TestSlowReplicaDropped: a connected replica that stops reading while the
// primary writes more than the backlog holds is dropped by the primary
// and full-syncs when it reads again.
func TestSlowReplicaDropped(t *testing.T) {
	clk := newClock()
	p := newNode(t, clk, nodeOpts{backlog: 64 << 10}, "a")
	r := newNode(t, clk, nodeOpts{}, "a")
	px := newProxy(t, p.bus)
	r.fol.Follow(t.Context(), px.addr)
	r.waitSynced(t, true)

	px.pause()
	// Far more than the socket buffers between the primary and the
	// replica, so the primary's sender blocks and the backlog overtakes it.
	val := make([]byte, 4<<10)
	for i := range 4000 {
		p.write(t, "a", fmt.Sprint("k", i%500), func(tx *keyspace.Txn, k []byte) { tx.SetString(k, val, 0) })
	}
	px.resume()
	r.waitSynced(t, true)
	r.waitCaughtUp(t, p)
	sameState(t, p, r)
	if st := r.fol.Status(); st.FullSyncs != 2 || st.PartialSyncs != 0 {
		t.Fatalf("status %+v: want 2 full syncs and no partial one", st)
	}
}

// TestSnapshotUnderConcurrentWrites: writers hammer the same keys (every
// kind, TTLs, deletes, renames, flushes of one namespace) while replicas
// full-sync; once the writers stop, every replica must equal the primary
// exactly.
func TestSnapshotUnderConcurrentWrites(t *testing.T) {
	clk := newClock()
	p := newNode(t, clk, nodeOpts{}, "a", "b")
	for i := range 3000 {
		p.write(t, "a", fmt.Sprint("k", i), func(tx *keyspace.Txn, k []byte) { tx.SetString(k, make([]byte, 64), 0) })
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ns := []string{"a", "b"}[rng.IntN(2)]
				key := fmt.Sprint("k", rng.IntN(200))
				switch rng.IntN(8) {
				case 0, 1:
					p.write(t, ns, key, func(tx *keyspace.Txn, k []byte) { tx.SetString(k, fmt.Appendf(nil, "%d-%d", w, i), 0) })
				case 2:
					p.write(t, ns, key+"l", func(tx *keyspace.Txn, k []byte) {
						e := tx.Get(k)
						if e == nil {
							e = tx.SetObject(k, keyspace.NewList(), 0)
						}
						e.Obj.PushBack(fmt.Appendf(nil, "%d", i))
						if e.Obj.Len() > 5 {
							e.Obj.PopFront()
						}
						tx.Update(k, e)
					})
				case 3:
					p.write(t, ns, key+"h", func(tx *keyspace.Txn, k []byte) {
						e := tx.Get(k)
						if e == nil {
							e = tx.SetObject(k, keyspace.NewHash(), 0)
						}
						e.Obj.HashSet(fmt.Appendf(nil, "f%d", i%7), fmt.Appendf(nil, "%d", i))
						tx.Update(k, e)
					})
				case 4:
					p.write(t, ns, key, func(tx *keyspace.Txn, k []byte) { tx.Delete(k) })
				case 5:
					p.write(t, ns, key, func(tx *keyspace.Txn, k []byte) {
						if e := tx.Get(k); e != nil {
							tx.SetExpire(k, e, t0+int64(rng.IntN(1000)))
						}
					})
				case 6:
					var tx keyspace.Txn
					ks := [][]byte{[]byte(key), []byte(key + "r")}
					db := p.db(t, ns)
					db.Begin(&tx, ks)
					if e := tx.Get(ks[0]); e != nil {
						tx.Rename(ks[0], ks[1], e)
					}
					tx.End()
				case 7:
					if ns == "b" && rng.IntN(50) == 0 {
						p.db(t, "b").Flush()
					}
				}
			}
		}()
	}
	var replicas []*node
	for range 3 {
		r := newNode(t, clk, nodeOpts{}, "a", "b")
		replicas = append(replicas, r)
		r.fol.Follow(t.Context(), p.bus)
	}
	for _, r := range replicas {
		r.waitSynced(t, true)
	}
	clk.ms.Add(500) // expire some keys mid-stream, lazily and actively
	for i := range 16 {
		p.db(t, "a").ExpireSample(i, 20)
	}
	close(stop)
	wg.Wait()
	for _, r := range replicas {
		r.waitCaughtUp(t, p)
		sameState(t, p, r)
	}
}
