package dump

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc64"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/portico-io/portico/cachenode/keyspace"
	"github.com/portico-io/portico/cachenode/namespace"
)

const now = int64(1_700_000_000_000)

func newDB() *keyspace.DB { return keyspace.New(keyspace.Config{Now: func() int64 { return now }}) }

// put stores fn's value at key in db and returns the encoding of it.
func put(t *testing.T, db *keyspace.DB, key []byte, fn func(tx *keyspace.Txn)) []byte {
	t.Helper()
	var tx keyspace.Txn
	db.Begin(&tx, [][]byte{key})
	defer tx.End()
	fn(&tx)
	e := tx.Peek(key)
	if e == nil {
		t.Fatalf("no entry at %q", key)
	}
	return AppendValue(nil, e)
}

// contents is a canonical description of key's value in db.
func contents(db *keyspace.DB, key []byte) string {
	var tx keyspace.Txn
	db.Begin(&tx, [][]byte{key})
	defer tx.End()
	e := tx.Peek(key)
	if e == nil {
		return "<nil>"
	}
	var items []string
	switch e.Kind() {
	case keyspace.KindString:
		items = append(items, string(e.Str))
	case keyspace.KindList:
		for i := 0; i < e.Obj.List.Len(); i++ {
			items = append(items, string(e.Obj.List.At(i)))
		}
	case keyspace.KindSet:
		for m := range e.Obj.Set {
			items = append(items, m)
		}
		slices.Sort(items)
	case keyspace.KindHash:
		for f, v := range e.Obj.HashAll() {
			items = append(items, f+"="+string(v))
		}
		slices.Sort(items)
	case keyspace.KindZset:
		for n := e.Obj.Zset.First(); n != nil; n = n.Next() {
			items = append(items, fmt.Sprintf("%s=%v", n.Member(), n.Score()))
		}
		items = append(items, e.Obj.Zset.Encoding())
	}
	return fmt.Sprintf("%s exp=%d %q", e.Kind(), e.ExpireAt(), items)
}

func TestValueRoundTrip(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	binKey := []byte{0, 1, 2, 0xff, '\r', '\n'}
	cases := []struct {
		name string
		key  []byte
		fill func(tx *keyspace.Txn, key []byte)
	}{
		{"empty string", []byte("e"), func(tx *keyspace.Txn, k []byte) { tx.SetString(k, nil, 0) }},
		{"string ttl", []byte("s"), func(tx *keyspace.Txn, k []byte) { tx.SetString(k, []byte("v"), now+5000) }},
		{"binary key", binKey, func(tx *keyspace.Txn, k []byte) { tx.SetString(k, binKey, 0) }},
		{"big string", []byte("big"), func(tx *keyspace.Txn, k []byte) { tx.SetString(k, big, 0) }},
		{"list", []byte("l"), func(tx *keyspace.Txn, k []byte) {
			o := keyspace.NewList()
			for _, v := range []string{"c", "", "a", "c"} {
				o.PushBack([]byte(v))
			}
			o.PushFront(big)
			tx.SetObject(k, o, now+1)
		}},
		{"set", []byte("{t}set"), func(tx *keyspace.Txn, k []byte) {
			o := keyspace.NewSet()
			for i := range 1000 {
				o.SetAdd(fmt.Appendf(nil, "m%d", i))
			}
			o.SetAdd(nil)
			tx.SetObject(k, o, 0)
		}},
		{"hash", []byte("h"), func(tx *keyspace.Txn, k []byte) {
			o := keyspace.NewHash()
			o.HashSet([]byte("f"), []byte("v"))
			o.HashSet([]byte(""), []byte(""))
			o.HashSet(binKey, big)
			tx.SetObject(k, o, now+99)
		}},
		{"zset", []byte("z"), func(tx *keyspace.Txn, k []byte) {
			o := keyspace.NewZset()
			for i, m := range []string{"a", "b", "", "tie1", "tie2"} {
				o.Zset.Set([]byte(m), float64(i%3)-0.5)
			}
			o.Zset.Set(binKey, math.Inf(-1))
			o.Zset.Set([]byte("top"), math.Inf(1))
			o.Zset.Set([]byte("negzero"), math.Copysign(0, -1))
			tx.SetObject(k, o, now+7)
		}},
		{"big zset", []byte("{t}zset"), func(tx *keyspace.Txn, k []byte) {
			o := keyspace.NewZset()
			for i := range 1000 {
				o.Zset.Set(fmt.Appendf(nil, "m%d", i), float64(i%17)*1.25)
			}
			tx.SetObject(k, o, 0)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src, dst := newDB(), newDB()
			enc := put(t, src, c.key, func(tx *keyspace.Txn) { c.fill(tx, c.key) })
			v, err := DecodeValue(enc)
			if err != nil {
				t.Fatal(err)
			}
			var tx keyspace.Txn
			dst.Begin(&tx, [][]byte{c.key})
			v.Store(&tx, c.key)
			tx.End()
			if got, want := contents(dst, c.key), contents(src, c.key); got != want {
				t.Fatalf("restored %.200s, want %.200s", got, want)
			}
			if dst.Used() != src.Used() {
				t.Fatalf("restored accounts %d bytes, source %d", dst.Used(), src.Used())
			}
		})
	}
}

func TestDecodeValueRejects(t *testing.T) {
	db := newDB()
	good := put(t, db, []byte("k"), func(tx *keyspace.Txn) { tx.SetString([]byte("k"), []byte("hello"), 0) })
	if _, err := DecodeValue(good); err != nil {
		t.Fatal(err)
	}
	for i := range good {
		flipped := slices.Clone(good)
		flipped[i] ^= 0x40
		if _, err := DecodeValue(flipped); !errors.Is(err, ErrCorrupt) {
			t.Errorf("byte %d flipped: err %v, want ErrCorrupt", i, err)
		}
	}
	for n := range len(good) {
		if _, err := DecodeValue(good[:n]); err == nil {
			t.Errorf("truncated to %d bytes: no error", n)
		}
	}
	// A wrong version with a valid checksum is ErrVersion.
	v2 := slices.Clone(good[:len(good)-8])
	v2[0] = 2
	v2 = appendCRC(v2)
	if _, err := DecodeValue(v2); !errors.Is(err, ErrVersion) {
		t.Errorf("version 2: err %v, want ErrVersion", err)
	}
	// A sorted set with a NaN score (checksum valid) is corrupt, and so is
	// one claiming more pairs than its bytes hold.
	nan := []byte{Version, byte(keyspace.KindZset), 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 'm'}
	nan = binary.LittleEndian.AppendUint64(nan, math.Float64bits(math.NaN()))
	if _, err := DecodeValue(appendCRC(nan)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("NaN score: err %v", err)
	}
	short := []byte{Version, byte(keyspace.KindZset), 0, 0, 0, 0, 0, 0, 0, 0, 2, 1, 'm', 0, 0, 0, 0, 0, 0, 0xf0, 0x3f}
	if _, err := DecodeValue(appendCRC(short)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("zset count past the end: err %v", err)
	}
	// A list claiming 2^40 elements in a few bytes must fail before allocating.
	lie := []byte{Version, byte(keyspace.KindList), 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 1, 'x'}
	if _, err := DecodeValue(appendCRC(lie)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("lying count: err %v", err)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	db := newDB()
	key := []byte("key\x00")
	var tx keyspace.Txn
	db.Begin(&tx, [][]byte{key})
	e := tx.SetString(key, []byte("val"), now+10)
	var stream []byte
	stream = AppendRecord(stream, OpSet, "ns1", key, e)
	tx.End()
	stream = AppendRecord(stream, OpDel, "ns1", key, nil)
	stream = AppendRecord(stream, OpFlush, "ns2", nil, nil)
	want := []string{"set ns1 \"key\\x00\" \"val\" 1700000000010", "del ns1 \"key\\x00\"", "flush ns2"}
	var got []string
	for b := stream; len(b) > 0; {
		// Every proper prefix of a record is ErrShort.
		_, n0, _ := ReadRecord(b)
		for cut := range n0 {
			if _, _, err := ReadRecord(b[:cut]); !errors.Is(err, ErrShort) {
				t.Fatalf("prefix %d of %d: err %v, want ErrShort", cut, n0, err)
			}
		}
		r, n, err := ReadRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		s := r.Op.String() + " " + r.NS
		if r.Op != OpFlush {
			s += fmt.Sprintf(" %q", r.Key)
		}
		if r.Op == OpSet {
			s += fmt.Sprintf(" %q %d", r.Value.Str, r.Value.ExpireAt)
		}
		got = append(got, s)
		b = b[n:]
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if _, _, err := ReadRecord([]byte{0xff, 0xff, 0xff, 0xff, 0x7f}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("huge length: %v, want ErrCorrupt", err)
	}
}

func TestApply(t *testing.T) {
	reg := namespace.NewRegistry(namespace.RegistryConfig{Now: func() int64 { return now }})
	if err := reg.Apply([]namespace.Settings{{Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	src := newDB()
	set := func(key, val string, exp int64) Record {
		enc := put(t, src, []byte(key), func(tx *keyspace.Txn) { tx.SetString([]byte(key), []byte(val), exp) })
		v, err := DecodeValue(enc)
		if err != nil {
			t.Fatal(err)
		}
		return Record{Op: OpSet, NS: "a", Key: []byte(key), Value: v}
	}
	ns, _ := reg.Get("a")
	apply := func(r Record) {
		t.Helper()
		if err := Apply(reg, &r, now); err != nil {
			t.Fatal(err)
		}
	}
	apply(set("k1", "v1", 0))
	apply(set("k2", "v2", now+1000))
	if got := contents(ns.DB, []byte("k2")); got != `string exp=1700000001000 ["v2"]` {
		t.Fatalf("k2 = %s", got)
	}
	old := set("k2", "old", now+1)
	old.Value.ExpireAt = now // deadline passed: deletes
	apply(old)
	if got := contents(ns.DB, []byte("k2")); got != "<nil>" {
		t.Fatalf("expired set left %s", got)
	}
	apply(Record{Op: OpDel, NS: "a", Key: []byte("k1")})
	if ns.DB.Len() != 0 {
		t.Fatalf("%d keys after del", ns.DB.Len())
	}
	apply(set("k3", "v", 0))
	apply(Record{Op: OpFlush, NS: "a"})
	if ns.DB.Len() != 0 {
		t.Fatalf("%d keys after flush", ns.DB.Len())
	}
	err := Apply(reg, &Record{Op: OpDel, NS: "nope", Key: []byte("k")}, now)
	if !errors.Is(err, ErrNamespace) || !bytes.Contains([]byte(err.Error()), []byte(`"nope"`)) {
		t.Fatalf("missing namespace: %v", err)
	}
}

func appendCRC(b []byte) []byte { return appendChecksum(b) }

func TestChecksumMatchesStdlib(t *testing.T) {
	tab := crc64.MakeTable(crc64.ECMA)
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 1100 {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		if got, want := checksum(p), crc64.Checksum(p, tab); got != want {
			t.Fatalf("length %d: %#x, want %#x", n, got, want)
		}
	}
}

func BenchmarkAppendValue100(b *testing.B) {
	db := newDB()
	var tx keyspace.Txn
	k := []byte("k")
	db.Begin(&tx, [][]byte{k})
	e := tx.SetString(k, make([]byte, 100), 0)
	tx.End()
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendValue(buf[:0], e)
	}
}
