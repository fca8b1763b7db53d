package keyspace

import (
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
