package keyspace

import (
	"fmt"
	"iter"
	"maps"
	"slices"
	"testing"

	"github.com/portico-io/portico/cachenode/evict"
)

// mirror is an Observer that keeps a copy of the DB from the changes alone:
// if any mutation path forgot to report, the copy diverges.
type mirror struct {
	keys    map[string]string
	changes int
	flushes int
}

func describe(e *Entry) string {
	var items []string
	switch e.Kind() {
	case KindString:
		items = []string{string(e.Str)}
	case KindList:
		for i := 0; i < e.Obj.List.Len(); i++ {
			items = append(items, string(e.Obj.List.At(i)))
		}
	case KindSet:
		items = slices.Sorted(maps.Keys(e.Obj.Set))
	case KindHash:
		for f, v := range e.Obj.HashAll() {
			items = append(items, f+"="+string(v))
		}
		slices.Sort(items)
	}
	return fmt.Sprintf("%s %d %q", e.Kind(), e.ExpireAt(), items)
}

func (m *mirror) Changed(db *DB, key []byte, e *Entry) {
	m.changes++
	if e == nil {
		delete(m.keys, string(key))
		return
	}
	m.keys[string(key)] = describe(e)
}

func (m *mirror) Flushed(db *DB) {
	m.flushes++
	clear(m.keys)
}

// state reads the DB directly (without expiring anything).
func state(db *DB) map[string]string {
	out := map[string]string{}
	for i := range db.NumShards() {
		db.ViewShard(i, func(entries iter.Seq2[string, *Entry]) {
			for k, e := range entries {
				out[k] = describe(e)
			}
		})
	}
	return out
}

// TestObserverSeesEveryChange: every mutation path (Txn writes and deletes,
// in-place container changes, TTL changes, rename, lazy expiry, Scan and
// ScanSlot expiry, active expiry, eviction, flush) is reported, each key
// once per Txn with its final state.
func TestObserverSeesEveryChange(t *testing.T) {
	c := &clock{ms: 1_000_000}
	m := &mirror{keys: map[string]string{}}
	db := New(Config{Shards: 8, Now: c.now, Observer: m, Name: "ns"})
	check := func(when string) {
		t.Helper()
		if got, want := m.keys, state(db); !maps.Equal(got, want) {
			t.Fatalf("%s: observer has %d keys %v, DB %d keys %v", when, len(got), got, len(want), want)
		}
	}
	for i := range 40 {
		write(db, fmt.Sprint("s", i), func(tx *Txn, k []byte) { tx.SetString(k, []byte("v"), 0) })
		write(db, fmt.Sprint("s", i), func(tx *Txn, k []byte) { tx.SetStringOver(k, tx.Get(k), []byte("w"), c.ms+10) })
		write(db, fmt.Sprint("l", i), func(tx *Txn, k []byte) {
			e := tx.SetObject(k, NewList(), 0)
			for j := range 10 {
				e.Obj.PushBack([]byte{byte('a' + j)})
			}
			tx.Update(k, e)
		})
		write(db, fmt.Sprint("h", i), func(tx *Txn, k []byte) {
			e := tx.SetObject(k, NewHash(), c.ms+1000)
			e.Obj.HashSet([]byte("f"), []byte("v"))
			tx.Update(k, e)
		})
	}
	check("writes")
	before := m.changes
	write(db, "l0", func(tx *Txn, k []byte) {
		e := tx.Get(k)
		for range 5 {
			e.Obj.PopFront()
			tx.Update(k, e)
		}
		tx.SetExpire(k, e, c.ms+500)
	})
	if m.changes != before+1 {
		t.Fatalf("one Txn changing one key five times reported %d changes", m.changes-before)
	}
	write(db, "h0", func(tx *Txn, k []byte) { tx.SetExpire(k, tx.Get(k), 0) })
	write(db, "l1", func(tx *Txn, k []byte) {
		e := tx.Get(k)
		for e.Obj.Len() > 0 {
			e.Obj.PopBack()
		}
		tx.Update(k, e) // empty: deleted
	})
	write(db, "s2", func(tx *Txn, k []byte) { tx.Delete(k) })
	var tx Txn
	ks := [][]byte{[]byte("l3"), []byte("renamed"), []byte("h3")}
	db.Begin(&tx, ks)
	tx.Rename(ks[0], ks[1], tx.Get(ks[0]))
	tx.Rename(ks[2], ks[1], tx.Get(ks[2])) // replaces the first rename
	tx.End()
	check("updates, deletes and renames")

	c.ms += 11 // s* expired
	write(db, "s5", func(tx *Txn, k []byte) { _ = tx.Get(k) })
	db.ScanSlot(Slot([]byte("s6")), func(string, *Entry) {})
	db.Scan(0, 3, func(string, *Entry) {})
	for i := range db.NumShards() {
		db.ExpireSample(i, 1000)
	}
	check("expiry")
	if db.Expired() != 39 { // s0..s39 but the deleted s2
		t.Fatalf("expired %d", db.Expired())
	}
	for range 10 {
		db.EvictOne(5)
	}
	if db.Evicted() == 0 {
		t.Fatal("nothing evicted")
	}
	check("eviction")
	db.Flush()
	if m.flushes != 1 || len(m.keys) != 0 {
		t.Fatalf("flush: %d flushes, %d keys left", m.flushes, len(m.keys))
	}
	write(db, "after", func(tx *Txn, k []byte) { tx.SetString(k, nil, 0) })
	check("after flush")
	if db.Name() != "ns" {
		t.Fatalf("Name = %q", db.Name())
	}
}

// TestObserverManyKeysOneTxn: a Txn over more keys than the inline dirty
// array reports each once.
func TestObserverManyKeysOneTxn(t *testing.T) {
	m := &mirror{keys: map[string]string{}}
	db := New(Config{Shards: 4, Observer: m, Policy: evict.AllKeysLRU})
	var keys [][]byte
	for i := range 20 {
		keys = append(keys, []byte(fmt.Sprint("k", i)))
	}
	var tx Txn
	db.Begin(&tx, keys)
	for range 3 {
		for _, k := range keys {
			tx.SetString(k, k, 0)
		}
	}
	tx.End()
	if m.changes != len(keys) || len(m.keys) != len(keys) {
		t.Fatalf("%d changes for %d keys", m.changes, len(keys))
	}
	db.Begin(&tx, keys[:1])
	tx.End()
	if m.changes != len(keys) {
		t.Fatal("a Txn that changed nothing reported changes")
	}
}
