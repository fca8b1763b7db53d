package keyspace

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
)

// benchTxn runs f on one of 1024 keys per iteration inside its own Txn,
// the way the command layer drives the keyspace.
func benchTxn(b *testing.B, db *DB, f func(tx *Txn, k []byte)) {
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte("key:" + strconv.Itoa(i))
	}
	var tx Txn
	one := make([][]byte, 1)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		one[0] = keys[i&1023]
		i++
		db.BeginAt(&tx, one, 1)
		f(&tx, one[0])
		tx.End()
	}
}

var benchVal = make([]byte, 100)

func benchSet(tx *Txn, k []byte) { tx.SetStringOver(k, tx.Get(k), benchVal, 0) }
func benchGet(tx *Txn, k []byte) { _ = tx.Get(k) }

// benchPush10 pushes ten elements in one Txn and trims back, as a
// ten-argument RPUSH followed by LTRIM would.
func benchPush10(tx *Txn, k []byte) {
	e := tx.Get(k)
	if e == nil {
		e = tx.SetObject(k, NewList(), 0)
	}
	for range 10 {
		e.Obj.PushBack(benchVal[:10])
	}
	for e.Obj.Len() > 10 {
		e.Obj.PopFront()
	}
	tx.Update(k, e)
}

func BenchmarkTxnSet(b *testing.B)    { benchTxn(b, New(Config{}), benchSet) }
func BenchmarkTxnGet(b *testing.B)    { benchTxn(b, New(Config{}), benchGet) }
func BenchmarkTxnPush10(b *testing.B) { benchTxn(b, New(Config{}), benchPush10) }

// nopObserver measures the cost of the hook itself.
type nopObserver struct{}

func (nopObserver) Changed(*DB, []byte, *Entry) {}
func (nopObserver) Flushed(*DB)                 {}

func BenchmarkTxnSetObserved(b *testing.B) {
	benchTxn(b, New(Config{Observer: nopObserver{}}), benchSet)
}

func BenchmarkTxnPush10Observed(b *testing.B) {
	benchTxn(b, New(Config{Observer: nopObserver{}}), benchPush10)
}

// BenchmarkTxnGetMany reads 100-byte values of 200k keys in random order
// and copies each out, as GET does into its reply: unlike the benchmarks
// above, the table does not fit in the CPU caches, so this measures the
// cache misses of a lookup (redis-benchmark -r 100000 does the same).
func BenchmarkTxnGetMany(b *testing.B) {
	const n = 200_000
	db := New(Config{})
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("key:%012d", i))
	}
	var tx Txn
	one := make([][]byte, 1)
	for _, k := range keys {
		one[0] = k
		db.BeginAt(&tx, one, 1)
		tx.SetString(k, benchVal, 0)
		tx.End()
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	out := make([]byte, 0, 256)
	i := 0
	for b.Loop() {
		one[0] = keys[i%n]
		i++
		db.BeginAt(&tx, one, 1)
		if e := tx.Get(one[0]); e != nil {
			out = append(out[:0], e.Str...)
		}
		tx.End()
	}
}

// BenchmarkZsetSet is ZADD's work on the sorted set alone, as in
// BenchmarkZsetVsRedisServer's ZADD case: 100k members, member and score
// drawn from 100k, so mostly a score change (a move through the list).
func BenchmarkZsetSet(b *testing.B) {
	z := NewZset().Zset
	members := make([][]byte, 100000)
	for i := range members {
		members[i] = fmt.Appendf(nil, "m:%d", i)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2 * len(members) {
		z.Set(members[r.IntN(len(members))], float64(r.IntN(len(members))))
	}
	b.ResetTimer()
	for range b.N {
		z.Set(members[r.IntN(len(members))], float64(r.IntN(len(members))))
	}
}
