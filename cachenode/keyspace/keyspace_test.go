package keyspace

import (
	"fmt"
	"testing"

	"github.com/portico-io/portico/cachenode/evict"
)

// TestSlot: the hash itself is tested in package slots (against
// redis-server); this checks the keyspace uses it.
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{"foo": 12182, "bar": 5061, "{user1000}.following": Slot([]byte("user1000")), "{}x": Slot([]byte("{}x")), "a{": Slot([]byte("a{"))} {
		if got := Slot([]byte(key)); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	if Slot([]byte("{user1000}.following")) != Slot([]byte("{user1000}.followers")) {
		t.Error("hash tags do not share a slot")
	}
}

type clock struct{ ms int64 }

func (c *clock) now() int64 { return c.ms }

func newDB(c *clock, p evict.Policy) *DB {
	return New(Config{Shards: 8, Now: c.now, Policy: p})
}

func write(db *DB, key string, f func(tx *Txn, k []byte)) {
	var tx Txn
	k := []byte(key)
	db.Begin(&tx, [][]byte{k})
	f(&tx, k)
	tx.End()
}

// TestAccountingReturnsToZero: every path that adds or removes bytes
// (overwrite, containers, expire, rename, delete, evict, flush) keeps Used
// exact, so a namespace's quota never drifts.
func TestAccountingReturnsToZero(t *testing.T) {
	c := &clock{ms: 1_000_000}
	db := newDB(c, evict.AllKeysLRU)
	for i := range 100 {
		write(db, fmt.Sprint("s", i), func(tx *Txn, k []byte) { tx.SetString(k, make([]byte, i), 0) })
		write(db, fmt.Sprint("s", i), func(tx *Txn, k []byte) { tx.SetString(k, make([]byte, 2*i+1), c.ms+10) })
		write(db, fmt.Sprint("l", i), func(tx *Txn, k []byte) {
			e := tx.SetObject(k, NewList(), 0)
			e.Obj.PushBack([]byte("abc"))
			e.Obj.PushFront(make([]byte, i))
			tx.Update(k, e)
		})
		write(db, fmt.Sprint("h", i), func(tx *Txn, k []byte) {
			e := tx.SetObject(k, NewHash(), 0)
			e.Obj.HashSet([]byte("f"), []byte("v"))
			e.Obj.HashSet([]byte("f"), make([]byte, i))
			e.Obj.HashSet([]byte("g"), []byte("v"))
			e.Obj.HashDel([]byte("g"))
			tx.Update(k, e)
		})
		write(db, fmt.Sprint("z", i), func(tx *Txn, k []byte) {
			e := tx.SetObject(k, NewSet(), 0)
			e.Obj.SetAdd([]byte("m"))
			e.Obj.SetAdd([]byte("n"))
			e.Obj.SetRemove("m")
			tx.Update(k, e)
		})
	}
	if db.Len() != 400 || db.Volatile() != 100 || db.Used() <= 0 || db.NodeUsage().Load() != db.Used() {
		t.Fatalf("len %d volatile %d used %d node %d", db.Len(), db.Volatile(), db.Used(), db.NodeUsage().Load())
	}
	// Rename a few across shards, pop a list empty (deletes the key).
	var tx Txn
	db.Begin(&tx, [][]byte{[]byte("s1"), []byte("renamed")})
	tx.Rename([]byte("s1"), []byte("renamed"), tx.Get([]byte("s1")))
	tx.End()
	write(db, "l5", func(tx *Txn, k []byte) {
		e := tx.Get(k)
		e.Obj.PopBack()
		e.Obj.PopFront()
		tx.Update(k, e)
	})
	if db.Len() != 399 {
		t.Fatalf("emptied list not deleted: len %d", db.Len())
	}
	c.ms += 11 // every s* key expired
	for i := 0; i < db.NumShards(); i++ {
		db.ExpireSample(i, 1000)
	}
	if db.Expired() != 100 || db.Volatile() != 0 {
		t.Fatalf("expired %d volatile %d", db.Expired(), db.Volatile())
	}
	for range 50 {
		if _, ok := db.EvictOne(5); !ok {
			t.Fatal("EvictOne found nothing")
		}
	}
	if db.Evicted() != 50 || db.Len() != 249 {
		t.Fatalf("evicted %d len %d", db.Evicted(), db.Len())
	}
	write(db, "h7", func(tx *Txn, k []byte) { tx.Delete(k) })
	db.Flush()
	if db.Used() != 0 || db.Len() != 0 || db.NodeUsage().Load() != 0 {
		t.Fatalf("after flush: used %d len %d node %d", db.Used(), db.Len(), db.NodeUsage().Load())
	}
}

func TestLazyExpiryAndScan(t *testing.T) {
	c := &clock{ms: 5_000}
	db := newDB(c, evict.AllKeysLRU)
	for i := range 50 {
		ttl := int64(0)
		if i%2 == 0 {
			ttl = c.ms + 100
		}
		write(db, fmt.Sprint("k", i), func(tx *Txn, k []byte) { tx.SetString(k, []byte("v"), ttl) })
	}
	c.ms += 100
	write(db, "k0", func(tx *Txn, k []byte) {
		if tx.Get(k) != nil {
			t.Error("expired key returned")
		}
	})
	if db.Expired() != 1 {
		t.Fatalf("lazy expiry counted %d", db.Expired())
	}
	seen := map[string]bool{}
	for cur := uint64(0); ; {
		cur = db.Scan(cur, 3, func(k string, e *Entry) { seen[k] = true })
		if cur == 0 {
			break
		}
	}
	if len(seen) != 25 || db.Len() != 25 {
		t.Fatalf("scan saw %d live keys, len %d; want 25 (expired keys skipped and reclaimed)", len(seen), db.Len())
	}
}

func TestEvictOneVolatileOnlyAndNoEviction(t *testing.T) {
	c := &clock{ms: 1_000}
	db := newDB(c, evict.VolatileTTL)
	write(db, "persistent", func(tx *Txn, k []byte) { tx.SetString(k, []byte("v"), 0) })
	if _, ok := db.EvictOne(5); ok {
		t.Fatal("volatile-ttl evicted a key without TTL")
	}
	write(db, "soon", func(tx *Txn, k []byte) { tx.SetString(k, []byte("v"), 2_000) })
	write(db, "later", func(tx *Txn, k []byte) { tx.SetString(k, []byte("v"), 9_000) })
	db.EvictOne(5)
	write(db, "soon", func(tx *Txn, k []byte) {
		if tx.Get(k) != nil {
			t.Error("volatile-ttl did not evict the soonest deadline first")
		}
	})
	db.SetPolicy(evict.NoEviction)
	if _, ok := db.EvictOne(5); ok {
		t.Fatal("noeviction evicted")
	}
}

func TestDequeWrapsAround(t *testing.T) {
	var d Deque
	for i := range 20 {
		d.PushBack([]byte{byte(i)})
		d.PushFront([]byte{byte(100 + i)})
		if i%3 == 0 {
			d.PopBack()
		}
	}
	want := d.Len()
	got := 0
	for d.Len() > 0 {
		d.PopFront()
		got++
	}
	if got != want || want != 33 {
		t.Fatalf("popped %d of %d", got, want)
	}
}

// TestAvgTTL: the active expiry samples feed INFO keyspace's avg_ttl.
func TestAvgTTL(t *testing.T) {
	c := &clock{ms: 1_000_000}
	db := newDB(c, evict.AllKeysLRU)
	if db.AvgTTL() != 0 {
		t.Fatal("avg_ttl before any key")
	}
	for i := range 40 {
		write(db, fmt.Sprint("k", i), func(tx *Txn, k []byte) { tx.SetString(k, []byte("v"), c.ms+10_000) })
	}
	write(db, "persistent", func(tx *Txn, k []byte) { tx.SetString(k, []byte("v"), 0) })
	for i := 0; i < db.NumShards(); i++ {
		db.ExpireSample(i, 100)
	}
	if got := db.AvgTTL(); got < 9_500 || got > 10_000 {
		t.Fatalf("avg_ttl %d ms, want about 10000", got)
	}
	c.ms += 10_000
	for i := 0; i < db.NumShards(); i++ {
		db.ExpireSample(i, 100)
	}
	if db.Volatile() != 0 || db.AvgTTL() != 0 {
		t.Fatalf("volatile %d avg_ttl %d once every TTL passed", db.Volatile(), db.AvgTTL())
	}
}
