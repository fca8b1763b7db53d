package record

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

func lww(ts uint64, v string) *kvv1.Record { return &kvv1.Record{Timestamp: ts, Value: []byte(v)} }

func TestLWWPicksNewestAndTombstoneWinsTies(t *testing.T) {
	got := Merge([]*kvv1.Record{lww(5, "a")}, []*kvv1.Record{lww(7, "b")})
	if len(got) != 1 || string(got[0].Value) != "b" {
		t.Fatalf("merge = %v", got)
	}
	tomb := &kvv1.Record{Timestamp: 7, Tombstone: true}
	got = Merge([]*kvv1.Record{lww(7, "b")}, []*kvv1.Record{tomb})
	if len(got) != 1 || !got[0].Tombstone {
		t.Fatalf("tie: %v, want the tombstone", got)
	}
}

// history simulates vector-clock writes as the store performs them: a
// client reads some replica (its context is that replica's joined
// context), a coordinating replica issues a dot above its earlier ones and
// merges, then its whole set spreads to a random subset of replicas. It
// returns snapshots of replica states along the way. LWW histories are
// plain random records.
func history(r *rand.Rand, dotted bool, size int) [][]*kvv1.Record {
	nodes := []string{"a", "b", "c"}
	state := make([][]*kvv1.Record, len(nodes))
	var snaps [][]*kvv1.Record
	for i := range size {
		rec := &kvv1.Record{Timestamp: uint64(r.IntN(20) + 1), Tombstone: r.IntN(4) == 0, Value: []byte{byte(r.IntN(3))}}
		co := r.IntN(len(nodes))
		if dotted {
			rec.Context = JoinContext(state[r.IntN(len(nodes))])
			rec.Dot = &kvv1.Dot{Node: nodes[co], Counter: uint64(i + 1)}
		}
		state[co] = Merge(state[co], []*kvv1.Record{rec})
		for j := range nodes {
			if j != co && r.IntN(2) == 0 {
				state[j] = Merge(state[j], state[co])
			}
		}
		for j := range nodes {
			snaps = append(snaps, state[j])
		}
	}
	return snaps
}

func randomSet(r *rand.Rand, snaps [][]*kvv1.Record) []*kvv1.Record {
	return snaps[r.IntN(len(snaps))]
}

// Replicas converge only if merge is commutative, associative and
// idempotent, whatever order hints, repair and read repair deliver in.
func TestMergeIsACI(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		all := history(r, i%2 == 0, 8)
		a, b, c := randomSet(r, all), randomSet(r, all), randomSet(r, all)
		if !Equal(Merge(a, b), Merge(b, a)) {
			t.Fatalf("not commutative: %v %v", a, b)
		}
		if !Equal(Merge(Merge(a, b), c), Merge(a, Merge(b, c))) {
			t.Fatalf("not associative: %v %v %v", a, b, c)
		}
		if !Equal(Merge(a, a), a) {
			t.Fatalf("not idempotent: %v", a)
		}
	}
}

func TestDottedConcurrentWritesBecomeSiblingsAndMergedContextResolves(t *testing.T) {
	// Two clients write blind (empty context) through the same coordinator.
	w1 := &kvv1.Record{Timestamp: 1, Dot: &kvv1.Dot{Node: "a", Counter: 10}, Value: []byte("x")}
	w2 := &kvv1.Record{Timestamp: 2, Dot: &kvv1.Dot{Node: "a", Counter: 11}, Value: []byte("y")}
	set := Merge([]*kvv1.Record{w1}, []*kvv1.Record{w2})
	if len(set) != 2 {
		t.Fatalf("siblings = %d, want 2", len(set))
	}
	ctx := JoinContext(set)
	w3 := &kvv1.Record{Timestamp: 3, Dot: &kvv1.Dot{Node: "b", Counter: 12}, Context: ctx, Value: []byte("xy")}
	set = Merge(set, []*kvv1.Record{w3})
	if len(set) != 1 || string(set[0].Value) != "xy" {
		t.Fatalf("after resolving write: %v", set)
	}
	// A stale write (context from before w2) stays a sibling of w3? No: w3
	// covers it only if its dot is in w3's context; a new blind write is
	// concurrent with w3.
	w4 := &kvv1.Record{Timestamp: 4, Dot: &kvv1.Dot{Node: "c", Counter: 13}, Context: []*kvv1.VersionEntry{{Node: "a", Counter: 10}}, Value: []byte("z")}
	set = Merge(set, []*kvv1.Record{w4})
	if len(set) != 2 {
		t.Fatalf("concurrent with w3: %d siblings, want 2", len(set))
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	in := []*kvv1.Record{{Timestamp: 9, ExpiresAtUnixMs: 100, Dot: &kvv1.Dot{Node: "n", Counter: 3}, Context: []*kvv1.VersionEntry{{Node: "m", Counter: 2}}, Value: []byte("v")}}
	b, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(b)
	if err != nil || !Equal(in, out) {
		t.Fatalf("round trip: %v %v", out, err)
	}
	if _, err := Decode([]byte{9, 1}); err == nil {
		t.Fatal("bad format byte accepted")
	}
}

func TestTTLAndPurge(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	r := &kvv1.Record{Timestamp: uint64(now.UnixMilli()) << 16, ExpiresAtUnixMs: now.Add(time.Second).UnixMilli(), Value: []byte("v")}
	if !Live(r, now) || Live(r, now.Add(time.Second)) {
		t.Fatal("TTL boundary wrong")
	}
	tomb := &kvv1.Record{Timestamp: uint64(now.UnixMilli()) << 16, Tombstone: true}
	if Purgeable([]*kvv1.Record{tomb}, now) || !Purgeable([]*kvv1.Record{tomb}, now.Add(time.Millisecond)) {
		t.Fatal("tombstone purge horizon wrong")
	}
	if Purgeable([]*kvv1.Record{r}, now) || !Purgeable([]*kvv1.Record{r}, now.Add(2*time.Second)) {
		t.Fatal("expired value purge horizon wrong")
	}
	if Purgeable([]*kvv1.Record{lww(1, "live")}, now) {
		t.Fatal("live value purgeable")
	}
}

func FuzzDecodeContext(f *testing.F) {
	f.Add(EncodeContext([]*kvv1.VersionEntry{{Node: "n1", Counter: 4}, {Node: "n2", Counter: 9}}))
	f.Add("")
	f.Add("%%%")
	f.Add("CgQKAm4xEAQ")
	f.Fuzz(func(t *testing.T, s string) {
		ctx, err := DecodeContext(s)
		if err != nil {
			return
		}
		again, err := DecodeContext(EncodeContext(ctx))
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !slices.EqualFunc(ctx, again, func(a, b *kvv1.VersionEntry) bool { return a.Node == b.Node && a.Counter == b.Counter }) {
			t.Fatalf("round trip changed the context")
		}
	})
}
