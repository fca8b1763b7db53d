package keyspace

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/portico-io/portico/cachenode/evict"
)

// book is a Ledger that keeps every key's bytes and its removals.
type book struct {
	mu               sync.Mutex
	bytes            map[string]int64
	expired, evicted map[string]int
}

func newBook() *book {
	return &book{bytes: map[string]int64{}, expired: map[string]int{}, evicted: map[string]int{}}
}

func (b *book) Sized(key string, delta int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bytes[key] += delta; b.bytes[key] == 0 {
		delete(b.bytes, key)
	}
}

func (b *book) keys() int { b.mu.Lock(); defer b.mu.Unlock(); return len(b.bytes) }

func (b *book) Expired(key string) { b.mu.Lock(); b.expired[key]++; b.mu.Unlock() }
func (b *book) Evicted(key string) { b.mu.Lock(); b.evicted[key]++; b.mu.Unlock() }

// check compares the book with the DB: each live key's accounted size, the
// total, and the removal counts.
func (b *book) check(t *testing.T, db *DB) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	live := map[string]int64{}
	for i := 0; i < db.NumShards(); i++ {
		sh := &db.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			live[k] = int64(e.size)
		}
		sh.mu.Unlock()
	}
	var sum int64
	for k, n := range b.bytes {
		if live[k] != n {
			t.Errorf("ledger has %q at %d bytes, the DB %d", k, n, live[k])
		}
		sum += n
	}
	for k := range live {
		if _, ok := b.bytes[k]; !ok {
			t.Errorf("ledger lacks live key %q", k)
		}
	}
	if sum != db.Used() {
		t.Errorf("ledger sums to %d bytes, DB used %d", sum, db.Used())
	}
	total := func(m map[string]int) (n int64) {
		for _, v := range m {
			n += int64(v)
		}
		return n
	}
	if total(b.expired) != db.Expired() || total(b.evicted) != db.Evicted() {
		t.Errorf("ledger saw %d expired and %d evicted, DB counted %d and %d",
			total(b.expired), total(b.evicted), db.Expired(), db.Evicted())
	}
}

// TestLedgerSeesEveryByte: every path that changes the bytes accounted
// (insert, overwrite, container updates, rename, delete, lazy and active
// expiry, eviction, flush) reaches the Ledger with the key, and its sums
// match the DB's.
func TestLedgerSeesEveryByte(t *testing.T) {
	c := &clock{ms: 1_000_000}
	db := newDB(c, evict.AllKeysLRU)
	b := newBook()
	db.SetLedger(b)
	for i := range 60 {
		write(db, fmt.Sprint("s:", i), func(tx *Txn, k []byte) { tx.SetString(k, make([]byte, i), 0) })
		write(db, fmt.Sprint("s:", i), func(tx *Txn, k []byte) { tx.SetString(k, make([]byte, 3*i+1), c.ms+10) })
		write(db, fmt.Sprint("l:", i), func(tx *Txn, k []byte) {
			e := tx.SetObject(k, NewList(), 0)
			e.Obj.PushBack(make([]byte, i))
			tx.Update(k, e)
		})
	}
	var tx Txn
	db.Begin(&tx, [][]byte{[]byte("l:1"), []byte("moved:1")})
	tx.Rename([]byte("l:1"), []byte("moved:1"), tx.Get([]byte("l:1")))
	tx.End()
	write(db, "l:2", func(tx *Txn, k []byte) { tx.Delete(k) })
	b.check(t, db)

	c.ms += 11                                              // every s: key is now expired
	write(db, "s:0", func(tx *Txn, k []byte) { tx.Get(k) }) // lazily
	db.ExpireSample(1, 1000)                                // actively, one shard
	db.Scan(0, 1<<30, func(string, *Entry) {})              // the rest, by a scan
	if db.Expired() != 60 || b.expired["s:0"] != 1 {
		t.Fatalf("expired %d, ledger saw s:0 expire %d times", db.Expired(), b.expired["s:0"])
	}
	for range 10 {
		if _, ok := db.EvictOne(5); !ok {
			t.Fatal("EvictOne found nothing")
		}
	}
	b.check(t, db)
	db.Flush()
	b.check(t, db)
	if len(b.bytes) != 0 {
		t.Fatalf("after a flush the ledger still holds %v", b.bytes)
	}
}

// TestSetLedgerWhileWriting: a Ledger installed while writers run starts
// with every key's bytes and misses no change after; the previous Ledger
// stops being told.
func TestSetLedgerWhileWriting(t *testing.T) {
	db := New(Config{Shards: 16, Now: func() int64 { return 1_000_000 }, Policy: evict.AllKeysLRU})
	first := newBook()
	db.SetLedger(first)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("k:%d", r.IntN(500))
				if r.IntN(4) == 0 {
					write(db, key, func(tx *Txn, k []byte) { tx.Delete(k) })
				} else {
					n := r.IntN(200)
					write(db, key, func(tx *Txn, k []byte) { tx.SetString(k, make([]byte, n), 0) })
				}
			}
		})
	}
	second := newBook()
	for db.Len() < 200 {
		write(db, "warm", func(tx *Txn, k []byte) { tx.SetString(k, []byte("v"), 0) })
	}
	db.SetLedger(second)
	frozen := func() int64 {
		first.mu.Lock()
		defer first.mu.Unlock()
		var n int64
		for _, v := range first.bytes {
			n += v
		}
		return n
	}()
	for second.keys() < 100 {
		write(db, "warm", func(tx *Txn, k []byte) { tx.SetString(k, []byte("vv"), 0) })
	}
	close(stop)
	wg.Wait()
	second.check(t, db)
	var n int64
	for _, v := range first.bytes {
		n += v
	}
	if n != frozen {
		t.Errorf("the replaced ledger was still told of changes: %d bytes, then %d", frozen, n)
	}
	db.SetLedger(nil)
	write(db, "after", func(tx *Txn, k []byte) { tx.SetString(k, []byte("v"), 0) })
	if _, ok := second.bytes["after"]; ok {
		t.Error("a removed ledger was told of a write")
	}
}
