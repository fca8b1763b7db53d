package repl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/portico-io/portico/cachenode/dump"
	"github.com/portico-io/portico/cachenode/keyspace"
	"github.com/portico-io/portico/cachenode/namespace"
)

// keyInShard returns a key whose primary shard (of 2) is s.
func keyInShard(s int) []byte {
	for i := 0; ; i++ {
		k := fmt.Appendf(nil, "k%d", i)
		if keyspace.Slot(k)&1 == s {
			return k
		}
	}
}

func shardHeader(ns string, shard, shards int, at int64) []byte {
	h := binary.AppendUvarint(nil, uint64(len(ns)))
	h = append(h, ns...)
	h = binary.AppendUvarint(h, uint64(shard))
	h = binary.AppendUvarint(h, uint64(shards))
	return binary.AppendUvarint(h, uint64(at))
}

func setRecord(t *testing.T, ns string, key []byte, val string) []byte {
	db := keyspace.New(keyspace.Config{})
	var tx keyspace.Txn
	db.Begin(&tx, [][]byte{key})
	defer tx.End()
	return dump.AppendRecord(nil, dump.OpSet, ns, key, tx.SetString(key, []byte(val), 0))
}

func get(t *testing.T, reg *namespace.Registry, ns string, key []byte) string {
	t.Helper()
	n, err := reg.Get(ns)
	if err != nil {
		t.Fatal(err)
	}
	var tx keyspace.Txn
	n.DB.Begin(&tx, [][]byte{key})
	defer tx.End()
	if e := tx.Peek(key); e != nil {
		return string(e.Str)
	}
	return "<nil>"
}

// TestApplierSkipsRecordsOlderThanTheirShard: after a snapshot, a stream
// record that starts before its shard's O_s is already in the snapshot
// and must not be applied over it; later ones are; records split across
// data frames apply once whole.
func TestApplierSkipsRecordsOlderThanTheirShard(t *testing.T) {
	reg := namespace.NewRegistry(namespace.RegistryConfig{Shards: 8})
	if err := reg.Apply([]namespace.Settings{{Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	k0, k1 := keyInShard(0), keyInShard(1)
	r1 := setRecord(t, "a", k0, "old")  // at 100: before shard 0's copy
	r2 := setRecord(t, "a", k1, "new1") // after shard 1's copy
	r3 := setRecord(t, "a", k0, "new0") // after shard 0's copy
	x := int64(100)
	o0 := x + int64(len(r1))
	a := newApplier(reg, nopMetrics(), quiet, x, true)
	frames := []struct {
		tag byte
		p   []byte
	}{
		{frameShard, shardHeader("a", 0, 2, o0)},
		{frameSnapshot, setRecord(t, "a", k0, "snap0")},
		{frameShard, shardHeader("a", 1, 2, x)},
		{frameEnd, nil},
	}
	for _, f := range frames {
		if err := a.frame(f.tag, f.p); err != nil {
			t.Fatal(err)
		}
	}
	if a.consistent() {
		t.Fatal("consistent before the stream passed shard 0's offset")
	}
	// r1 and r2 plus half of r3.
	data := append(append(append([]byte(nil), r1...), r2...), r3[:len(r3)/2]...)
	if err := a.frame(frameData, data); err != nil {
		t.Fatal(err)
	}
	if got := get(t, reg, "a", k0); got != "snap0" {
		t.Fatalf("k0 = %q after a record older than its shard's snapshot, want the snapshot's", got)
	}
	if got := get(t, reg, "a", k1); got != "new1" {
		t.Fatalf("k1 = %q, want new1", got)
	}
	if !a.consistent() || a.off != o0+int64(len(r2)) {
		t.Fatalf("consistent %v at %d, want at %d", a.consistent(), a.off, o0+int64(len(r2)))
	}
	if err := a.frame(frameData, r3[len(r3)/2:]); err != nil {
		t.Fatal(err)
	}
	if got := get(t, reg, "a", k0); got != "new0" || len(a.pending) != 0 {
		t.Fatalf("k0 = %q with %d bytes pending, want new0", got, len(a.pending))
	}
}

// TestApplierFlushDuringSnapshot: a namespace flush logged while that
// namespace was being copied applies when every shard was copied before
// it, is skipped when every shard was copied after it, and forces a new
// full sync when it falls between the shards' copies.
func TestApplierFlushDuringSnapshot(t *testing.T) {
	flush := dump.AppendRecord(nil, dump.OpFlush, "a", nil, nil)
	for _, c := range []struct {
		name   string
		o0, o1 int64
		keys   int64
		err    error
	}{
		{"copied before the flush", 0, 0, 0, nil},
		{"copied after the flush", 50, 50, 1, nil},
		{"flush between the copies", 0, 50, 0, ErrResync},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg := namespace.NewRegistry(namespace.RegistryConfig{Shards: 8})
			if err := reg.Apply([]namespace.Settings{{Name: "a"}}); err != nil {
				t.Fatal(err)
			}
			a := newApplier(reg, nopMetrics(), quiet, 0, true)
			for _, f := range [][2][]byte{
				{{frameShard}, shardHeader("a", 0, 2, c.o0)},
				{{frameShard}, shardHeader("a", 1, 2, c.o1)},
				{{frameSnapshot}, setRecord(t, "a", keyInShard(1), "v")},
				{{frameEnd}, nil},
			} {
				if err := a.frame(f[0][0], f[1]); err != nil {
					t.Fatal(err)
				}
			}
			err := a.frame(frameData, flush)
			if !errors.Is(err, c.err) || (c.err == nil && err != nil) {
				t.Fatalf("err %v, want %v", err, c.err)
			}
			ns, _ := reg.Get("a")
			if c.err == nil && ns.DB.Len() != c.keys {
				t.Fatalf("%d keys after the flush record, want %d", ns.DB.Len(), c.keys)
			}
		})
	}
}

// TestApplierRejectsMisplacedFrames: frames out of protocol order are
// stream errors, not silently applied.
func TestApplierRejectsMisplacedFrames(t *testing.T) {
	reg := namespace.NewRegistry(namespace.RegistryConfig{})
	partial := newApplier(reg, nopMetrics(), quiet, 0, false)
	for _, tag := range []byte{frameShard, frameSnapshot, frameEnd, 'Z'} {
		if err := partial.frame(tag, nil); !errors.Is(err, ErrStream) {
			t.Errorf("frame %q in a partial sync: %v", tag, err)
		}
	}
	full := newApplier(reg, nopMetrics(), quiet, 10, true)
	if err := full.frame(frameData, nil); !errors.Is(err, ErrStream) {
		t.Errorf("data inside a snapshot: %v", err)
	}
	for _, h := range [][]byte{shardHeader("a", 2, 2, 10), shardHeader("a", 0, 3, 10), shardHeader("a", 0, 2, 9), {0xff}} {
		if err := full.frame(frameShard, h); !errors.Is(err, ErrStream) {
			t.Errorf("bad shard header %x: %v", h, err)
		}
	}
}
