package ring

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

func grow(t *testing.T, size, n int) []Node {
	t.Helper()
	var nodes []Node
	for i := range size {
		nd := Node{ID: fmt.Sprintf("n%d", i)}
		nd.Tokens = AllocateTokens(nodes, nd, DefaultVnodes, n)
		nodes = append(nodes, nd)
	}
	return nodes
}

func assertBalanced(t *testing.T, r *Ring, tol float64) {
	t.Helper()
	own := r.Ownership()
	ideal := 1 / float64(len(own))
	sum := 0.0
	for id, o := range own {
		sum += o
		if math.Abs(o-ideal)/ideal > tol {
			t.Errorf("%s owns %.4f, ideal %.4f (±%.0f%%): %v", id, o, ideal, tol*100, own)
		}
	}
	if math.Abs(sum-1) > 1e-6 {
		t.Errorf("ownership sums to %f", sum)
	}
}

func TestAllocationBalancesJoinsAndLeaves(t *testing.T) {
	for size := 3; size <= 8; size++ {
		nodes := grow(t, size, 3)
		assertBalanced(t, New(nodes, 3), 0.15)
		// Leaving: the rest keep their tokens.
		assertBalanced(t, New(nodes[1:], 3), 0.15)
	}
}

func TestPreferenceListsAreDistinctAndRackAware(t *testing.T) {
	nodes := grow(t, 6, 3)
	for i := range nodes {
		nodes[i].Rack = fmt.Sprintf("r%d", i%3)
	}
	r := New(nodes, 3)
	for _, rg := range r.Ranges() {
		if len(rg.Replicas) != 3 {
			t.Fatalf("range %v has %d replicas", rg, len(rg.Replicas))
		}
		racks := map[string]bool{}
		for _, id := range rg.Replicas {
			nd, _ := r.Node(id)
			racks[nd.Rack] = true
		}
		if len(racks) != 3 {
			t.Fatalf("range %v replicas %v span %d racks, want 3", rg, rg.Replicas, len(racks))
		}
		if got := r.Preference(rg.End); !slices.Equal(got, rg.Replicas) {
			t.Fatalf("Preference(%d) = %v, want %v", rg.End, got, rg.Replicas)
		}
		if got := r.Preference(rg.Start + 1); !slices.Equal(got, rg.Replicas) {
			t.Fatalf("Preference(start+1) = %v, want %v", got, rg.Replicas)
		}
	}
	// Two racks for N=3: both racks used, third replica from either.
	for i := range nodes {
		nodes[i].Rack = fmt.Sprintf("r%d", i%2)
	}
	for _, rg := range New(nodes, 3).Ranges() {
		seen := map[string]bool{}
		for _, id := range rg.Replicas {
			if seen[id] {
				t.Fatalf("duplicate replica in %v", rg.Replicas)
			}
			seen[id] = true
		}
		if len(seen) != 3 {
			t.Fatalf("range has %d replicas", len(seen))
		}
	}
}

func TestFewerNodesThanN(t *testing.T) {
	nodes := grow(t, 2, 3)
	r := New(nodes, 3)
	if got := r.Preference(Token([]byte("k"))); len(got) != 2 {
		t.Fatalf("preference = %v, want both nodes", got)
	}
}

func TestRangeContainsAndLeafOf(t *testing.T) {
	wrap := Range{Start: math.MaxUint64 - 10, End: 10}
	for _, tc := range []struct {
		t    uint64
		want bool
	}{{math.MaxUint64 - 10, false}, {math.MaxUint64 - 9, true}, {0, true}, {10, true}, {11, false}} {
		if got := wrap.Contains(tc.t); got != tc.want {
			t.Errorf("Contains(%d) = %v", tc.t, got)
		}
	}
	if got := LeafOf(wrap, 1, math.MaxUint64-9); got != 0 {
		t.Errorf("first token leaf %d", got)
	}
	if got := LeafOf(wrap, 1, 10); got != 1 {
		t.Errorf("last token leaf %d", got)
	}
	whole := Range{Start: 5, End: 5}
	if got := LeafOf(whole, 4, 5); got != 15 {
		t.Errorf("whole ring last token leaf = %d, want 15", got)
	}
}

func BenchmarkAllocate(b *testing.B) {
	for b.Loop() {
		var nodes []Node
		for i := range 6 {
			nd := Node{ID: fmt.Sprintf("n%d", i)}
			nd.Tokens = AllocateTokens(nodes, nd, DefaultVnodes, 3)
			nodes = append(nodes, nd)
		}
	}
}
