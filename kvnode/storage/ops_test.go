package storage

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/portico-io/portico/kvnode/ring"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// Cleanup keeps exactly the keys inside the kept ranges (wrapping ones
// included) and leaves hints and metadata alone.
func TestDeleteOutsideKeepsOnlyOwnedRanges(t *testing.T) {
	cases := map[string][]ring.Range{
		"two disjoint":      {{Start: 1 << 60, End: 3 << 60}, {Start: 8 << 60, End: 9 << 60}},
		"wrapping":          {{Start: 14 << 60, End: 2 << 60}},
		"touching":          {{Start: 1 << 60, End: 2 << 60}, {Start: 2 << 60, End: 5 << 60}},
		"nothing kept":      nil,
		"whole ring":        {{Start: 5, End: 5}},
		"ends at the max":   {{Start: 12 << 60, End: math.MaxUint64}},
		"starts at the max": {{Start: math.MaxUint64, End: 1 << 60}},
	}
	for name, keep := range cases {
		t.Run(name, func(t *testing.T) {
			st, err := Open(t.TempDir(), Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if err := st.PutMeta("tokens", []byte("x")); err != nil {
				t.Fatal(err)
			}
			if err := st.PutHint("n9", time.Now(), []byte("h")); err != nil {
				t.Fatal(err)
			}
			want := map[string]bool{}
			for i := range 400 {
				k := fmt.Appendf(nil, "k-%d", i)
				if _, err := st.Apply(k, []*kvv1.Record{{Timestamp: 1, Value: k}}); err != nil {
					t.Fatal(err)
				}
				for _, rg := range keep {
					if rg.Contains(ring.Token(k)) {
						want[string(k)] = true
					}
				}
			}
			cl, err := st.DeleteOutside(keep)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.CompactCleaned(cl); err != nil {
				t.Fatal(err)
			}
			n := cl.Deleted
			if n != 400-len(want) {
				t.Fatalf("deleted %d, want %d", n, 400-len(want))
			}
			for i := range 400 {
				k := fmt.Appendf(nil, "k-%d", i)
				recs, err := st.Get(k)
				if err != nil {
					t.Fatal(err)
				}
				if (recs != nil) != want[string(k)] {
					t.Fatalf("%s present=%v, owned=%v", k, recs != nil, want[string(k)])
				}
			}
			if m, _ := st.GetMeta("tokens"); string(m) != "x" {
				t.Fatal("metadata lost")
			}
			if hs, err := st.HintTargets(); err != nil || hs["n9"] != 1 {
				t.Fatalf("hints: %v %v", hs, err)
			}
		})
	}
}

// A checkpoint taken of an unsynced store holds every applied write and
// opens as a store of its own.
func TestCheckpointHoldsEveryAppliedWrite(t *testing.T) {
	st, err := Open(t.TempDir(), Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i := range 100 {
		k := fmt.Appendf(nil, "k-%d", i)
		if _, err := st.Apply(k, []*kvv1.Record{{Timestamp: 1, Value: k}}); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "cp")
	if err := st.Checkpoint(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply([]byte("after"), []*kvv1.Record{{Timestamp: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Checkpoint(dir); err == nil {
		t.Fatal("a checkpoint over an existing directory succeeded")
	}
	cp, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	if n, _ := cp.Count(); n != 100 {
		t.Fatalf("checkpoint holds %d keys, want 100", n)
	}
}
