package dump

import (
	"testing"

	"github.com/portico-io/portico/cachenode/keyspace"
)

func seeds(f *testing.F) [][]byte {
	db := keyspace.New(keyspace.Config{})
	var tx keyspace.Txn
	keys := [][]byte{[]byte("s"), []byte("l"), []byte("h"), []byte("z")}
	db.Begin(&tx, keys)
	defer tx.End()
	s := tx.SetString(keys[0], []byte("v"), 5)
	l := keyspace.NewList()
	l.PushBack([]byte("a"))
	le := tx.SetObject(keys[1], l, 0)
	h := keyspace.NewHash()
	h.HashSet([]byte("f"), []byte("v"))
	he := tx.SetObject(keys[2], h, 0)
	z := keyspace.NewZset()
	z.Zset.Set([]byte("m"), 1.5)
	z.Zset.Set([]byte("n"), -2)
	ze := tx.SetObject(keys[3], z, 0)
	return [][]byte{AppendValue(nil, s), AppendValue(nil, le), AppendValue(nil, he), AppendValue(nil, ze),
		AppendRecord(AppendRecord(nil, OpSet, "ns", keys[0], s), OpDel, "ns", keys[1], nil),
		AppendRecord(nil, OpFlush, "ns", nil, nil)}
}

// FuzzDecodeValue: arbitrary input must not panic, and whatever decodes
// must re-encode to the same bytes once stored.
func FuzzDecodeValue(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeValue(b)
		if err != nil {
			return
		}
		if n := len(v.Items) + len(v.Fields); n > len(b) {
			t.Fatalf("%d elements from %d bytes", n, len(b))
		}
		db := keyspace.New(keyspace.Config{Now: func() int64 { return 0 }})
		var tx keyspace.Txn
		k := [][]byte{[]byte("k")}
		db.Begin(&tx, k)
		defer tx.End()
		if e := v.Store(&tx, k[0]); e != nil {
			if _, err := DecodeValue(AppendValue(nil, e)); err != nil {
				t.Fatalf("re-encoding of a decoded value does not decode: %v", err)
			}
		}
	})
}

// FuzzReadRecord: arbitrary input must not panic or claim more bytes than
// it was given.
func FuzzReadRecord(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for len(b) > 0 {
			_, n, err := ReadRecord(b)
			if err != nil {
				return
			}
			if n <= 0 || n > len(b) {
				t.Fatalf("consumed %d of %d bytes", n, len(b))
			}
			b = b[n:]
		}
	})
}
