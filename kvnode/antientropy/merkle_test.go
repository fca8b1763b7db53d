package antientropy

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/portico-io/portico/kvnode/ring"
)

// Leaf ranges must partition the range exactly as ring.LeafOf assigns
// tokens, or repair would stream the wrong keys for a differing leaf.
func TestLeafRangesMatchLeafOf(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ranges := []ring.Range{{Start: 5, End: 5}, {Start: math.MaxUint64 - 100, End: 200}, {Start: 10, End: 40}}
	for range 20 {
		ranges = append(ranges, ring.Range{Start: r.Uint64(), End: r.Uint64()})
	}
	for _, rg := range ranges {
		for _, depth := range []uint{1, 5, 8} {
			for range 200 {
				tk := rg.Start + 1 + r.Uint64N(max(rg.Width(), 1))
				if !rg.Contains(tk) {
					continue
				}
				leaf := ring.LeafOf(rg, depth, tk)
				lr, ok := LeafRange(rg, depth, leaf)
				if !ok || !lr.Contains(tk) {
					t.Fatalf("range %v depth %d: token %d in leaf %d, leaf range %v (ok=%v)", rg, depth, tk, leaf, lr, ok)
				}
			}
		}
	}
}

func TestDiffLeavesFindsOnlyDifferences(t *testing.T) {
	mk := func(leaves [][]byte) [][]byte {
		n := len(leaves)
		nodes := make([][]byte, 2*n-1)
		copy(nodes[n-1:], leaves)
		for i := n - 2; i >= 0; i-- {
			nodes[i] = append(append([]byte{}, nodes[2*i+1]...), nodes[2*i+2]...)
		}
		return nodes
	}
	a := mk([][]byte{{1}, {2}, {3}, {4}})
	b := mk([][]byte{{1}, {9}, {3}, {4}})
	if got := DiffLeaves(a, b, 2); len(got) != 1 || got[0] != 1 {
		t.Fatalf("diff = %v, want [1]", got)
	}
	if got := DiffLeaves(a, a, 2); len(got) != 0 {
		t.Fatalf("identical trees differ: %v", got)
	}
}
