package keyspace

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/portico-io/portico/cachenode/evict"
)

func get(db *DB, key string) (e *Entry) {
	write(db, key, func(tx *Txn, k []byte) { e = tx.Peek(k) })
	return e
}

// TestEntryBlocks: a small string lives in its entry's block with the key;
// overwrites that fit stay in place, larger ones move the key to a new
// entry, keeping TTL, and the TTL set shares the block's key bytes.
func TestEntryBlocks(t *testing.T) {
	c := &clock{ms: 1_000}
	db := newDB(c, evict.AllKeysLRU)
	write(db, "user:1", func(tx *Txn, k []byte) { tx.SetString(k, []byte("hello"), 9_000) })
	e := get(db, "user:1")
	if !inline(e, []byte("user:1")) || string(e.Str) != "hello" || cap(e.Str) < 5 {
		t.Fatalf("new small string not in its block: %q cap %d", e.Str, cap(e.Str))
	}
	base := uintptr(unsafe.Pointer(e))
	sh := &db.shards[db.shardOf([]byte("user:1"))]
	for k := range sh.m {
		if k == "user:1" && uintptr(unsafe.Pointer(unsafe.StringData(k))) != base+unsafe.Sizeof(Entry{}) {
			t.Fatal("the map's key is not the block's")
		}
	}
	for k := range sh.vol {
		if k == "user:1" && uintptr(unsafe.Pointer(unsafe.StringData(k))) != base+unsafe.Sizeof(Entry{}) {
			t.Fatal("the TTL set's key is not the block's")
		}
	}

	room := cap(e.Str)
	write(db, "user:1", func(tx *Txn, k []byte) { tx.Rewrite(k, tx.Peek(k), bytes.Repeat([]byte("x"), room)) })
	if get(db, "user:1") != e {
		t.Fatal("a value that fits the room moved")
	}
	big := bytes.Repeat([]byte("y"), room+1)
	write(db, "user:1", func(tx *Txn, k []byte) { tx.Rewrite(k, tx.Peek(k), big) })
	ne := get(db, "user:1")
	if ne == e || !bytes.Equal(ne.Str, big) || ne.ExpireAt() != 9_000 || !inline(ne, []byte("user:1")) {
		t.Fatalf("outgrown value: moved %v, %d bytes, TTL %d", ne != e, len(ne.Str), ne.ExpireAt())
	}
	if db.Len() != 1 || db.Volatile() != 1 {
		t.Fatalf("len %d volatile %d after a move", db.Len(), db.Volatile())
	}

	// Past maxBlock the value gets its own buffer; the key stays inline.
	huge := bytes.Repeat([]byte("z"), maxBlock+1)
	write(db, "user:1", func(tx *Txn, k []byte) { tx.SetString(k, huge, 0) })
	he := get(db, "user:1")
	if inline(he, []byte("user:1")) || !bytes.Equal(he.Str, huge) || storedKey(he, []byte("user:1")) != "user:1" {
		t.Fatal("a value past maxBlock")
	}
	// An object over an inline string gives the room back.
	write(db, "s", func(tx *Txn, k []byte) { tx.SetString(k, []byte("abc"), 0) })
	write(db, "s", func(tx *Txn, k []byte) {
		o := NewSet()
		o.SetAdd([]byte("m"))
		tx.SetObject(k, o, 0)
	})
	if se := get(db, "s"); se.Str != nil || se.Kind() != KindSet {
		t.Fatal("object over an inline string")
	}
	// Keys longer than maxInlineKey: a plain entry.
	long := strings.Repeat("k", maxInlineKey+1)
	write(db, long, func(tx *Txn, k []byte) { tx.SetString(k, []byte("v"), 5_000) })
	if le := get(db, long); string(le.Str) != "v" || storedKey(le, []byte(long)) != long {
		t.Fatal("long key")
	}
	checkSizes(t, db)
}

// checkSizes: every entry's size is what entrySize says, and Used sums
// them: no path leaves bytes unaccounted.
func checkSizes(t *testing.T, db *DB) {
	t.Helper()
	var sum int64
	for i := range db.shards {
		for k, e := range db.shards[i].m {
			if want := entrySize(len(k), e); e.size != want {
				t.Fatalf("%q: size %d, want %d", k, e.size, want)
			}
			if e.Obj == nil && inline(e, []byte(k)) && uintptr(unsafe.Pointer(unsafe.StringData(k))) != uintptr(unsafe.Pointer(e))+unsafe.Sizeof(Entry{}) {
				t.Fatalf("%q: inline value, key elsewhere", k)
			}
			sum += int64(e.size)
		}
		// The TTL set holds the map's own key strings (no copy that would
		// keep an old block alive).
		for k := range db.shards[i].vol {
			e := db.shards[i].m[k]
			if e == nil || e.expireAt == 0 {
				t.Fatalf("%q in the TTL set without a TTL", k)
			}
			if len(k) <= maxInlineKey && unsafe.StringData(k) != unsafe.StringData(storedKey(e, []byte(k))) {
				t.Fatalf("%q: the TTL set's key is not the entry's", k)
			}
		}
	}
	if sum != db.Used() {
		t.Fatalf("entries hold %d bytes, Used %d", sum, db.Used())
	}
}

// TestEntryModel runs random writes of every kind (SET of every size,
// APPEND, INCR-style rewrites, objects, RENAME, EXPIRE, DEL) against a
// map: values, TTLs and the memory accounting must match at every step.
func TestEntryModel(t *testing.T) {
	c := &clock{ms: 1_000}
	db := newDB(c, evict.AllKeysLRU)
	r := rand.New(rand.NewPCG(7, 7))
	type val struct {
		s   string
		obj bool
		exp int64
	}
	model := map[string]val{}
	keys := []string{"", "a", "user:1", "sixteen-byte-key", strings.Repeat("k", 40), strings.Repeat("L", 64), strings.Repeat("M", 65)}
	sizes := []int{0, 1, 5, 15, 16, 17, 100, 112, 400, maxBlock - 64, maxBlock, maxBlock + 1, 2000}
	for step := range 20000 {
		key := keys[r.IntN(len(keys))]
		v := strings.Repeat(string(rune('a'+step%26)), sizes[r.IntN(len(sizes))])
		switch op := r.IntN(7); op {
		case 0: // SET
			exp := int64(0)
			if r.IntN(2) == 0 {
				exp = c.ms + 1_000_000
			}
			write(db, key, func(tx *Txn, k []byte) { tx.SetString(k, []byte(v), exp) })
			model[key] = val{s: v, exp: exp}
		case 1: // APPEND
			if m, ok := model[key]; ok && !m.obj {
				write(db, key, func(tx *Txn, k []byte) { tx.Append(k, tx.Get(k), []byte(v)) })
				m.s += v
				model[key] = m
			}
		case 2: // INCR-like rewrite
			if m, ok := model[key]; ok && !m.obj {
				write(db, key, func(tx *Txn, k []byte) { tx.Rewrite(k, tx.Get(k), []byte(v)) })
				m.s = v
				model[key] = m
			}
		case 3: // an object
			write(db, key, func(tx *Txn, k []byte) {
				o := NewList()
				o.PushBack([]byte(v))
				tx.SetObject(k, o, 0)
			})
			model[key] = val{obj: true}
		case 4: // RENAME to another key
			dst := keys[r.IntN(len(keys))]
			if _, ok := model[key]; ok && dst != key {
				var tx Txn
				db.Begin(&tx, [][]byte{[]byte(key), []byte(dst)})
				tx.Rename([]byte(key), []byte(dst), tx.Get([]byte(key)))
				tx.End()
				model[dst] = model[key]
				delete(model, key)
			}
		case 5: // EXPIRE / PERSIST
			if m, ok := model[key]; ok {
				exp := int64(0)
				if r.IntN(2) == 0 {
					exp = c.ms + 2_000_000
				}
				write(db, key, func(tx *Txn, k []byte) { tx.SetExpire(k, tx.Get(k), exp) })
				m.exp = exp
				model[key] = m
			}
		case 6:
			write(db, key, func(tx *Txn, k []byte) { tx.Delete(k) })
			delete(model, key)
		}
		if step%97 == 0 || step == 19999 {
			checkSizes(t, db)
			for _, k := range keys {
				e, m := get(db, k), model[k]
				_, want := model[k]
				switch {
				case (e != nil) != want:
					t.Fatalf("step %d: %q present %v, model %v", step, k, e != nil, want)
				case e == nil:
				case m.obj != (e.Obj != nil) || (!m.obj && string(e.Str) != m.s) || e.ExpireAt() != m.exp:
					t.Fatalf("step %d: %q = %d bytes obj %v exp %d, model %d bytes obj %v exp %d",
						step, k, len(e.Str), e.Obj != nil, e.ExpireAt(), len(m.s), m.obj, m.exp)
				}
			}
			if db.Len() != int64(len(model)) {
				t.Fatalf("step %d: len %d, model %d", step, db.Len(), len(model))
			}
			vol := int64(0)
			for _, m := range model {
				if m.exp != 0 {
					vol++
				}
			}
			if db.Volatile() != vol {
				t.Fatalf("step %d: volatile %d, model %d", step, db.Volatile(), vol)
			}
		}
	}
	db.Flush()
	if db.Used() != 0 {
		t.Fatalf("used %d after flush", db.Used())
	}
}
