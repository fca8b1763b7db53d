// Package antientropy repairs replicas in the background: for each token
// range a node replicates it builds a Merkle tree (a binary tree of hashes
// over equal-width sub-ranges of tokens), compares it with every other
// replica's, and streams only the keys of the leaves that differ, in both
// directions. A full pass must complete inside the tombstone grace period,
// or a replica that missed a delete could resurrect the value once the
// tombstone is purged elsewhere.
package antientropy

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"math/bits"
	"time"

	"github.com/portico-io/portico/kvnode/record"
	"github.com/portico-io/portico/kvnode/ring"
	"github.com/portico-io/portico/kvnode/storage"
)

// DefaultDepth gives 2^8 = 256 leaves per range.
const DefaultDepth = 8

// BuildTree hashes rg's keys (dead since before gcBefore excluded) into a
// complete tree of the given depth, in heap order (root first).
func BuildTree(st *storage.Store, rg ring.Range, depth uint, gcBefore time.Time) ([][]byte, error) {
	leaves := 1 << depth
	hs := make([]hash.Hash, leaves)
	var lenBuf [8]byte
	err := st.Scan(rg, nil, gcBefore, func(e storage.Entry) bool {
		i := ring.LeafOf(rg, depth, e.Token)
		if hs[i] == nil {
			hs[i] = sha256.New()
		}
		binary.BigEndian.PutUint64(lenBuf[:], uint64(len(e.Key)))
		hs[i].Write(lenBuf[:])
		hs[i].Write(e.Key)
		hs[i].Write(record.Digest(e.Records))
		return true
	})
	if err != nil {
		return nil, err
	}
	nodes := make([][]byte, 2*leaves-1)
	empty := sha256.Sum256(nil)
	for i := range leaves {
		if hs[i] == nil {
			nodes[leaves-1+i] = empty[:]
		} else {
			nodes[leaves-1+i] = hs[i].Sum(nil)
		}
	}
	for i := leaves - 2; i >= 0; i-- {
		h := sha256.New()
		h.Write(nodes[2*i+1])
		h.Write(nodes[2*i+2])
		nodes[i] = h.Sum(nil)
	}
	return nodes, nil
}

// DiffLeaves walks two trees from the root, descending only into differing
// subtrees, and returns the indexes of the differing leaves.
func DiffLeaves(a, b [][]byte, depth uint) []int {
	if len(a) != len(b) || len(a) != 2*(1<<depth)-1 {
		out := make([]int, 1<<depth)
		for i := range out {
			out[i] = i
		}
		return out
	}
	var out []int
	var walk func(i int)
	walk = func(i int) {
		if string(a[i]) == string(b[i]) {
			return
		}
		if i >= len(a)/2 {
			out = append(out, i-len(a)/2)
			return
		}
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
	return out
}

// LeafRange is the token range covered by leaf i of rg, matching
// ring.LeafOf; ok is false for a leaf that covers no token (rg narrower
// than the number of leaves).
func LeafRange(rg ring.Range, depth uint, i int) (r ring.Range, ok bool) {
	lo, hi := leafLow(rg, depth, i), leafLow(rg, depth, i+1)
	if lo == hi {
		return ring.Range{}, false
	}
	return ring.Range{Start: rg.Start + lo, End: rg.Start + hi}, true
}

// leafLow is the smallest offset (token - Start - 1) in leaf i: ceil(i·w/L).
// For i == L it is the width itself (wrapping to 0 for the whole ring, which
// makes the last leaf end at Start == End).
func leafLow(rg ring.Range, depth uint, i int) uint64 {
	L := uint64(1) << depth
	if rg.Start == rg.End {
		return uint64(i) << (64 - depth) // w = 2^64
	}
	w := rg.Width()
	hi, lo := bits.Mul64(uint64(i), w)
	lo, carry := bits.Add64(lo, L-1, 0)
	hi += carry
	q, _ := bits.Div64(hi, lo, L)
	return q
}
