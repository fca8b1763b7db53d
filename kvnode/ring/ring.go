// Package ring is kvnode's consistent-hash ring: Murmur3 64-bit tokens,
// several vnodes per physical node, and per-range preference lists of N
// distinct nodes, spread over racks when racks are configured. A Ring is
// immutable and safe for concurrent use; membership builds a new one on
// every change.
package ring

import (
	"math"
	"math/bits"
	"slices"
	"sort"

	"github.com/spaolacci/murmur3"
)

// DefaultVnodes is the number of tokens a node takes unless configured.
const DefaultVnodes = 16

// Token hashes a key onto the ring (Murmur3 x64, first 64 bits).
func Token(key []byte) uint64 { return murmur3.Sum64(key) }

// Node is one physical member with its tokens.
type Node struct {
	ID     string   `json:"id"`
	Addr   string   `json:"addr"`
	Rack   string   `json:"rack,omitempty"`
	Tokens []uint64 `json:"tokens"`
}

// Range is (Start, End] on the ring, wrapping; Start == End is the whole ring.
type Range struct {
	Start    uint64   `json:"start"`
	End      uint64   `json:"end"`
	Replicas []string `json:"replicas"`
}

// Width is the number of tokens in r (the whole ring reports MaxUint64).
func (r Range) Width() uint64 {
	if r.Start == r.End {
		return math.MaxUint64
	}
	return r.End - r.Start
}

// Contains reports whether t lies in (Start, End].
func (r Range) Contains(t uint64) bool {
	if r.Start == r.End {
		return true
	}
	return t-r.Start-1 < r.End-r.Start
}

type vnode struct {
	token uint64
	node  string
}

// Ring maps tokens to preference lists.
type Ring struct {
	n      int
	vnodes []vnode
	prefs  [][]string // prefs[i]: preference list of the range ending at vnodes[i]
	nodes  map[string]Node
}

// New builds a ring of nodes with replication factor n. Duplicate tokens keep
// the node with the smaller id.
func New(nodes []Node, n int) *Ring {
	r := &Ring{n: n, nodes: make(map[string]Node, len(nodes))}
	seen := map[uint64]string{}
	for _, nd := range nodes {
		r.nodes[nd.ID] = nd
		for _, t := range nd.Tokens {
			if cur, ok := seen[t]; ok && cur < nd.ID {
				continue
			}
			seen[t] = nd.ID
		}
	}
	for t, id := range seen {
		r.vnodes = append(r.vnodes, vnode{t, id})
	}
	slices.SortFunc(r.vnodes, func(a, b vnode) int {
		switch {
		case a.token < b.token:
			return -1
		case a.token > b.token:
			return 1
		}
		return 0
	})
	racks := map[string]bool{}
	for _, nd := range nodes {
		racks[nd.Rack] = true
	}
	rackAware := len(racks) > 1
	r.prefs = make([][]string, len(r.vnodes))
	for i := range r.vnodes {
		r.prefs[i] = r.walk(i, rackAware)
	}
	return r
}

// walk builds the preference list starting at vnode i: distinct nodes
// clockwise, first one per rack, then (if racks run out) the skipped nodes
// in ring order.
func (r *Ring) walk(i int, rackAware bool) []string {
	want := min(r.n, len(r.nodes))
	out := make([]string, 0, want)
	var skipped []string
	usedNode := map[string]bool{}
	usedRack := map[string]bool{}
	for k := 0; k < len(r.vnodes) && len(out) < want; k++ {
		id := r.vnodes[(i+k)%len(r.vnodes)].node
		if usedNode[id] {
			continue
		}
		usedNode[id] = true
		rack := r.nodes[id].Rack
		if rackAware && usedRack[rack] {
			skipped = append(skipped, id)
			continue
		}
		usedRack[rack] = true
		out = append(out, id)
	}
	for _, id := range skipped {
		if len(out) == want {
			break
		}
		out = append(out, id)
	}
	return out
}

// N is the replication factor the ring was built with.
func (r *Ring) N() int { return r.n }

// Empty reports whether the ring has no tokens.
func (r *Ring) Empty() bool { return len(r.vnodes) == 0 }

// Nodes returns the members, sorted by id.
func (r *Ring) Nodes() []Node {
	out := make([]Node, 0, len(r.nodes))
	for _, n := range r.nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b Node) int { return cmpString(a.ID, b.ID) })
	return out
}

// Node returns one member.
func (r *Ring) Node(id string) (Node, bool) {
	n, ok := r.nodes[id]
	return n, ok
}

func (r *Ring) index(t uint64) int {
	i := sort.Search(len(r.vnodes), func(i int) bool { return r.vnodes[i].token >= t })
	if i == len(r.vnodes) {
		i = 0
	}
	return i
}

// Preference returns the ids of the replicas for token t, primary first.
// The caller must not modify the slice.
func (r *Ring) Preference(t uint64) []string {
	if len(r.vnodes) == 0 {
		return nil
	}
	return r.prefs[r.index(t)]
}

// Ranges returns every vnode range with its replicas, in token order.
func (r *Ring) Ranges() []Range {
	out := make([]Range, len(r.vnodes))
	for i, v := range r.vnodes {
		prev := r.vnodes[(i+len(r.vnodes)-1)%len(r.vnodes)].token
		out[i] = Range{Start: prev, End: v.token, Replicas: r.prefs[i]}
	}
	return out
}

// RangesOf returns the ranges id replicates.
func (r *Ring) RangesOf(id string) []Range {
	var out []Range
	for _, rg := range r.Ranges() {
		if slices.Contains(rg.Replicas, id) {
			out = append(out, rg)
		}
	}
	return out
}

// Ownership returns, per node, the fraction of the key space it replicates
// divided by N: 1/len(nodes) each on a perfectly balanced ring.
func (r *Ring) Ownership() map[string]float64 {
	out := map[string]float64{}
	for id := range r.nodes {
		out[id] = 0
	}
	if len(r.vnodes) == 0 {
		return out
	}
	for _, rg := range r.Ranges() {
		w := float64(rg.Width()) / math.MaxUint64
		for _, id := range rg.Replicas {
			out[id] += w / float64(len(rg.Replicas))
		}
	}
	return out
}

// InitialTokens spreads count tokens evenly with an offset derived from the
// node id: what a node takes when it founds a cluster alone.
func InitialTokens(id string, count int) []uint64 {
	off := murmur3.Sum64([]byte(id))
	step := math.MaxUint64 / uint64(count)
	out := make([]uint64, count)
	for i := range out {
		out[i] = off + uint64(i)*step
	}
	return out
}

// AllocateTokens picks count tokens for a node joining existing so that
// replicated ownership (what each node stores, not just its primary ranges)
// ends up as even as possible: it seeds the tokens at the midpoints of the
// widest ranges, then moves each token in turn to the range midpoint that
// most reduces the worst deviation from 1/nodes, until no move helps.
// Racks are not considered.
func AllocateTokens(existing []Node, joiner Node, count, n int) []uint64 {
	if len(existing) == 0 {
		return InitialTokens(joiner.ID, count)
	}
	ids := map[string]int{}
	var base []tok
	for _, nd := range existing {
		if _, ok := ids[nd.ID]; !ok {
			ids[nd.ID] = len(ids)
		}
		for _, t := range nd.Tokens {
			base = append(base, tok{t, ids[nd.ID]})
		}
	}
	self := len(ids)
	nodes := self + 1
	mine := make([]uint64, 0, count)
	build := func(extra []uint64) []tok {
		out := slices.Clone(base)
		for _, t := range extra {
			out = append(out, tok{t, self})
		}
		slices.SortFunc(out, func(a, b tok) int { return cmpUint(a.t, b.t) })
		return slices.CompactFunc(out, func(a, b tok) bool { return a.t == b.t })
	}
	// Seed: split the widest range, count times.
	for range count {
		toks := build(mine)
		best, bestW := uint64(0), uint64(0)
		for i := range toks {
			prev := toks[(i+len(toks)-1)%len(toks)].t
			w := toks[i].t - prev
			if len(toks) == 1 {
				w = math.MaxUint64
			}
			if w > bestW {
				best, bestW = prev+w/2, w
			}
		}
		mine = append(mine, best)
	}
	score := func(toks []tok) float64 {
		own := ownership(toks, n, nodes)
		ideal := 1 / float64(nodes)
		worst, sq := 0.0, 0.0
		for _, o := range own {
			d := math.Abs(o-ideal) / ideal
			worst = max(worst, d)
			sq += d * d
		}
		return worst*1000 + sq
	}
	cur := score(build(mine))
	for round := 0; round < 6; round++ {
		improved := false
		for j := range mine {
			others := append(slices.Clone(mine[:j]), mine[j+1:]...)
			toks := build(others)
			bestT, bestS := mine[j], cur
			trial := make([]tok, len(toks)+1)
			for i := range toks {
				prev := toks[(i+len(toks)-1)%len(toks)].t
				cand := prev + (toks[i].t-prev)/2
				// Insert cand in order without re-sorting: before toks[i],
				// or at the end when the range wraps past the last token.
				at := i
				if cand > toks[len(toks)-1].t {
					at = len(toks)
				} else if i == 0 && cand < toks[0].t {
					at = 0
				}
				copy(trial, toks[:at])
				trial[at] = tok{cand, self}
				copy(trial[at+1:], toks[at:])
				if s := score(trial); s < bestS-1e-9 {
					bestT, bestS = cand, s
				}
			}
			if bestT != mine[j] {
				mine[j], cur, improved = bestT, bestS, true
			}
		}
		if !improved {
			break
		}
	}
	slices.Sort(mine)
	return mine
}

type tok struct {
	t  uint64
	id int
}

// ownership is Ring.Ownership on a bare sorted token list (no racks), fast
// enough to evaluate thousands of candidate placements.
func ownership(toks []tok, n, nodes int) []float64 {
	own := make([]float64, nodes)
	seen := make([]int, nodes)
	want := min(n, nodes)
	for i := range toks {
		w := float64(toks[i].t - toks[(i+len(toks)-1)%len(toks)].t)
		if len(toks) == 1 {
			w = math.MaxUint64
		}
		stamp, got := i+1, 0
		for k := 0; k < len(toks) && got < want; k++ {
			id := toks[(i+k)%len(toks)].id
			if seen[id] != stamp {
				seen[id] = stamp
				own[id] += w
				got++
			}
		}
	}
	for i := range own {
		own[i] /= math.MaxUint64 * float64(want)
	}
	return own
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// LeafOf maps t in rg to one of 2^depth equal-width leaves.
func LeafOf(rg Range, depth uint, t uint64) int {
	off := t - rg.Start - 1
	hi, lo := bits.Mul64(off, 1<<depth)
	w := rg.Width()
	if rg.Start == rg.End {
		return int(hi) // whole ring: off * 2^depth / 2^64
	}
	q, _ := bits.Div64(hi, lo, w)
	return int(q)
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
