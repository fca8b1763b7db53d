package repl

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/portico-io/portico/cachenode/dump"
	"github.com/portico-io/portico/cachenode/keyspace"
	"github.com/portico-io/portico/cachenode/namespace"
)

// TestFeedRing: the backlog wraps, keeps the newest BacklogBytes, reads
// across the wrap, and reports readers that fell behind.
func TestFeedRing(t *testing.T) {
	f := NewFeed(FeedConfig{BacklogBytes: 100})
	var all []byte
	for i := range 30 {
		rec := []byte(fmt.Sprintf("<%d>", i))
		all = append(all, rec...)
		f.append(rec)
	}
	start, end := f.Backlog()
	if end != int64(len(all)) || start != end-100 {
		t.Fatalf("backlog [%d, %d), want [%d, %d)", start, end, len(all)-100, len(all))
	}
	for off := start; off <= end; off += 7 {
		p := make([]byte, 33)
		n, err := f.ReadAt(p, off)
		if err != nil || !bytes.Equal(p[:n], all[off:min(off+33, end)]) {
			t.Fatalf("ReadAt(%d) = %q, %v; want %q", off, p[:n], err, all[off:min(off+33, end)])
		}
	}
	if _, err := f.ReadAt(make([]byte, 1), start-1); !errors.Is(err, ErrBehind) {
		t.Fatalf("read before the backlog: %v", err)
	}
	if _, err := f.ReadAt(make([]byte, 1), end+1); !errors.Is(err, ErrBehind) {
		t.Fatalf("read past the end: %v", err)
	}
	// A record larger than the backlog empties it.
	f.append(make([]byte, 150))
	if s, e := f.Backlog(); s != e || e != end+150 {
		t.Fatalf("after an oversized record: [%d, %d)", s, e)
	}
	f.append([]byte("next"))
	p := make([]byte, 10)
	if n, err := f.ReadAt(p, end+150); err != nil || string(p[:n]) != "next" {
		t.Fatalf("after an oversized record: %q, %v", p[:n], err)
	}
	// Same with an oversized record before the ring reached full size.
	g := NewFeed(FeedConfig{BacklogBytes: 100})
	g.append([]byte("ab"))
	g.append(make([]byte, 200))
	g.append([]byte("cd"))
	if n, err := g.ReadAt(p, 202); err != nil || string(p[:n]) != "cd" {
		t.Fatalf("oversized record while growing: %q, %v", p[:n], err)
	}
}

// TestFeedWaitWakes: a waiting reader wakes on the next append and on
// context end, and Promote changes the replid but not the offset.
func TestFeedWaitWakes(t *testing.T) {
	f := NewFeed(FeedConfig{})
	woke := make(chan error)
	go func() { woke <- f.Wait(context.Background(), 0) }()
	// Wait has either registered or will see end > 0; both return.
	f.append([]byte("x"))
	if err := <-woke; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { woke <- f.Wait(ctx, 1) }()
	cancel()
	if err := <-woke; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after cancel: %v", err)
	}
	id, off := f.Position()
	if len(id) != 40 {
		t.Fatalf("replid %q", id)
	}
	if nid := f.Promote(); nid == id || f.Offset() != off {
		t.Fatalf("Promote: %q (was %q), offset %d (was %d)", nid, id, f.Offset(), off)
	}
}

// TestFeedRecordsDecode: what the Feed logs from a real DB decodes back
// to the changes, in order.
func TestFeedRecordsDecode(t *testing.T) {
	f := NewFeed(FeedConfig{})
	db := keyspace.New(keyspace.Config{Name: "ns", Observer: f})
	var tx keyspace.Txn
	k := [][]byte{[]byte("k")}
	db.Begin(&tx, k)
	tx.SetString(k[0], []byte("before"), 0)
	tx.End()
	if f.Offset() != 0 {
		t.Fatalf("an inactive feed logged %d bytes", f.Offset())
	}
	f.Activate()
	db.Begin(&tx, k)
	tx.SetString(k[0], []byte("v"), 0)
	tx.End()
	db.Begin(&tx, k)
	tx.Delete(k[0])
	tx.End()
	db.Flush()
	p := make([]byte, 1000)
	n, _ := f.ReadAt(p, 0)
	var got []string
	for b := p[:n]; len(b) > 0; {
		r, m, err := dump.ReadRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%v %s %s %s", r.Op, r.NS, r.Key, r.Value.Str))
		b = b[m:]
	}
	if want := []string{"set ns k v", "del ns k ", "flush ns  "}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("records %q, want %q", got, want)
	}
}

// BenchmarkFeedChanged measures logging one 100-byte SET from parallel
// writers, the cost the feed adds to every write.
func BenchmarkFeedChanged(b *testing.B) {
	f := warmFeed()
	db := keyspace.New(keyspace.Config{Name: "default"})
	var tx keyspace.Txn
	k := []byte("key:12345")
	db.Begin(&tx, [][]byte{k})
	e := tx.SetString(k, make([]byte, 100), 0)
	tx.End()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			f.Changed(db, k, e)
		}
	})
}

// FuzzStream: arbitrary bytes after the SYNC reply, as a full or a partial
// sync, never panic the replica, and whatever applies leaves a registry
// that still works.
func FuzzStream(f *testing.F) {
	// Seed with a real full-sync stream.
	var seed []byte
	reg := namespace.NewRegistry(namespace.RegistryConfig{Shards: 4})
	db, _ := reg.Get(namespace.Default)
	var tx keyspace.Txn
	k := [][]byte{[]byte("k"), []byte("l")}
	db.DB.Begin(&tx, k)
	e := tx.SetString(k[0], []byte("v"), 0)
	rec := dump.AppendRecord(nil, dump.OpSet, namespace.Default, k[0], e)
	tx.End()
	seed = appendFrame(seed, frameShard, append([]byte{7}, append([]byte("default"), 0, 4, 0)...))
	seed = appendFrame(seed, frameSnapshot, rec)
	seed = appendFrame(seed, frameEnd, nil)
	seed = appendFrame(seed, frameData, append(rec, dump.AppendRecord(nil, dump.OpFlush, "default", nil, nil)...))
	seed = appendFrame(seed, framePing, []byte{5})
	f.Add(true, seed)
	f.Add(false, seed[bytes.IndexByte(seed, frameData):])
	f.Fuzz(func(t *testing.T, full bool, in []byte) {
		reg := namespace.NewRegistry(namespace.RegistryConfig{Shards: 4, Now: func() int64 { return 1 }})
		a := newApplier(reg, nopMetrics(), quiet, 0, full)
		fr := &frameReader{br: bufio.NewReader(bytes.NewReader(in))}
		for {
			tag, p, err := fr.next()
			if err != nil {
				break
			}
			if err := a.frame(tag, p); err != nil {
				break
			}
			if a.off < 0 || len(a.pending) > len(in) {
				t.Fatalf("offset %d, %d pending bytes from %d bytes of input", a.off, len(a.pending), len(in))
			}
		}
		def, _ := reg.Get(namespace.Default)
		var tx keyspace.Txn
		def.DB.Begin(&tx, [][]byte{[]byte("probe")})
		tx.SetString([]byte("probe"), nil, 0)
		tx.End()
	})
}

// BenchmarkTxnSetFed is keyspace's BenchmarkTxnSet with a Feed observing:
// a SET of a 100-byte value on one of 1024 keys, logged.
func BenchmarkTxnSetFed(b *testing.B) {
	f := warmFeed()
	db := keyspace.New(keyspace.Config{Name: "default", Observer: f})
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key:%d", i)
	}
	val := make([]byte, 100)
	var tx keyspace.Txn
	one := make([][]byte, 1)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		one[0] = keys[i&1023]
		i++
		db.BeginAt(&tx, one, 1)
		tx.SetStringOver(one[0], tx.Get(one[0]), val, 0)
		tx.End()
	}
}

// warmFeed returns a feed whose backlog is already allocated and written
// once, so benchmarks measure the steady state rather than the first touch
// of fresh memory (page faults dominate that on a VM).
func warmFeed() *Feed {
	f := NewFeed(FeedConfig{BacklogBytes: 8 << 20})
	f.Activate()
	f.append(make([]byte, 4<<20))
	f.append(make([]byte, 4<<20))
	return f
}
