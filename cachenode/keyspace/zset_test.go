package keyspace

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"unsafe"
)

// checkZset verifies every invariant of z's skip list and map: order,
// back links, tail, spans on every level (each node's rank), the scores
// links keep of their targets, length, the map pointing at the list's
// nodes, and the byte count.
func checkZset(t *testing.T, z *Zset) {
	t.Helper()
	var prev *ZNode
	n, bytes := 0, int64(0)
	for x := z.First(); x != nil; x = x.Next() {
		n++
		if prev != nil && !(prev.score < x.score || (prev.score == x.score && prev.member < x.member)) {
			t.Fatalf("out of order: (%v %q) then (%v %q)", prev.score, prev.member, x.score, x.member)
		}
		if x.backward != prev {
			t.Fatalf("%q: backward link wrong", x.member)
		}
		if z.dict[x.member] != x {
			t.Fatalf("%q: map does not point at its node", x.member)
		}
		if math.IsNaN(x.score) {
			t.Fatalf("%q: NaN score", x.member)
		}
		bytes += memberCost(len(x.member))
		prev = x
	}
	if z.tail != prev || n != z.length || len(z.dict) != n || z.bytes != bytes {
		t.Fatalf("tail ok %v, walked %d, length %d, map %d, bytes %d want %d", z.tail == prev, n, z.length, len(z.dict), z.bytes, bytes)
	}
	ranks := map[*ZNode]int{}
	i := 0
	for x := z.First(); x != nil; x = x.Next() {
		i++
		ranks[x] = i
	}
	for l := range z.level {
		x, rank := z.header, 0
		for x.lv(l).forward != nil {
			rank += x.lv(l).span
			x = x.lv(l).forward
			if ranks[x] != rank {
				t.Fatalf("level %d: %q reached at rank %d, is %d", l, x.member, rank, ranks[x])
			}
			if from := z.header.lv(l); x == from.forward && math.Float64bits(from.score) != math.Float64bits(x.score) {
				t.Fatalf("level %d: the header's link to %q keeps score %v, not %v", l, x.member, from.score, x.score)
			}
			if f := x.lv(l).forward; f != nil && math.Float64bits(x.lv(l).score) != math.Float64bits(f.score) {
				t.Fatalf("level %d: the link %q→%q keeps score %v, not %v", l, x.member, f.member, x.lv(l).score, f.score)
			}
		}
	}
	if z.level < z.header.height && z.header.lv(z.level).forward != nil {
		t.Fatal("a level above z.level is linked")
	}
}

type pair struct {
	m string
	s float64
}

func sortedPairs(m map[string]float64) []pair {
	out := make([]pair, 0, len(m))
	for k, v := range m {
		out = append(out, pair{k, v})
	}
	slices.SortFunc(out, func(a, b pair) int {
		if c := cmp.Compare(a.s, b.s); c != 0 {
			return c
		}
		return cmp.Compare(a.m, b.m)
	})
	return out
}

// scoreIn is the test's own reading of a score range.
func scoreIn(rg ScoreRange, v float64) bool {
	lo := v >= rg.Min
	if rg.MinEx {
		lo = v > rg.Min
	}
	hi := v <= rg.Max
	if rg.MaxEx {
		hi = v < rg.Max
	}
	return lo && hi
}

func randScoreRange(r *rand.Rand) ScoreRange {
	pick := func() float64 {
		switch r.IntN(8) {
		case 0:
			return math.Inf(-1)
		case 1:
			return math.Inf(1)
		}
		return float64(r.IntN(20)) / 2
	}
	return ScoreRange{Min: pick(), Max: pick(), MinEx: r.IntN(2) == 0, MaxEx: r.IntN(2) == 0}
}

// lexIn is the test's own reading of a lex range: "-" and "+" are below
// and above everything, "[x" includes x and "(x" excludes it.
func lexIn(rg LexRange, s string) bool {
	lo, hi := true, true
	switch {
	case rg.Min.Inf > 0:
		lo = false
	case rg.Min.Inf == 0 && rg.Min.Ex:
		lo = s > rg.Min.S
	case rg.Min.Inf == 0:
		lo = s >= rg.Min.S
	}
	switch {
	case rg.Max.Inf < 0:
		hi = false
	case rg.Max.Inf == 0 && rg.Max.Ex:
		hi = s < rg.Max.S
	case rg.Max.Inf == 0:
		hi = s <= rg.Max.S
	}
	return lo && hi
}

func randLexRange(r *rand.Rand) LexRange {
	pick := func() LexBound {
		switch r.IntN(6) {
		case 0:
			return LexBound{Inf: -1}
		case 1:
			return LexBound{Inf: 1}
		}
		return LexBound{S: fmt.Sprintf("m%d", r.IntN(60)), Ex: r.IntN(2) == 0}
	}
	return LexRange{Min: pick(), Max: pick()}
}

// TestZsetAgainstModel drives a Zset and a plain map with the same random
// operations and compares every answer with the sorted map, checking the
// skip list's invariants as it goes.
func TestZsetAgainstModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	z := NewZset().Zset
	model := map[string]float64{}
	for op := range 20000 {
		m := fmt.Sprintf("m%d", r.IntN(60))
		switch k := r.IntN(10); {
		case k < 4:
			s := float64(r.IntN(20)) / 2 // many ties
			if r.IntN(20) == 0 {
				s = math.Inf(r.IntN(2)*2 - 1)
			}
			_, had := model[m]
			if added := z.Set([]byte(m), s); added == had {
				t.Fatalf("op %d: Set(%q) added=%v, model had it %v", op, m, added, had)
			}
			model[m] = s
		case k < 6:
			_, had := model[m]
			if got := z.Remove([]byte(m)); got != had {
				t.Fatalf("op %d: Remove(%q) = %v", op, m, got)
			}
			delete(model, m)
		case k == 6:
			rg := randScoreRange(r)
			want := 0
			for _, v := range model {
				if scoreIn(rg, v) {
					want++
				}
			}
			if r.IntN(4) == 0 {
				if got := z.RemoveScore(&rg); got != want {
					t.Fatalf("op %d: RemoveScore(%+v) = %d, want %d", op, rg, got, want)
				}
				for k, v := range model {
					if scoreIn(rg, v) {
						delete(model, k)
					}
				}
			} else if got := z.CountScore(&rg); got != want {
				t.Fatalf("op %d: CountScore(%+v) = %d, want %d", op, rg, got, want)
			}
		case k == 7:
			rg := randLexRange(r)
			for _, m := range []string{"m1", "m10", "m5", "m59", "x", ""} {
				if rg.Contains(m) != lexIn(rg, m) {
					t.Fatalf("lex range %+v: Contains(%q) = %v", rg, m, rg.Contains(m))
				}
			}
			// Lex order is only meaningful with one score: check it on a
			// copy of the members, all at score 0.
			lz := NewZset().Zset
			var members []string
			for m := range model {
				lz.Set([]byte(m), 0)
				members = append(members, m)
			}
			slices.Sort(members)
			var in []string
			for _, m := range members {
				if lexIn(rg, m) {
					in = append(in, m)
				}
			}
			first, last := lz.FirstInLex(&rg), lz.LastInLex(&rg)
			if len(in) == 0 {
				if first != nil || last != nil || lz.CountLex(&rg) != 0 {
					t.Fatalf("op %d: empty lex range %+v found members", op, rg)
				}
			} else if first == nil || last == nil || first.member != in[0] || last.member != in[len(in)-1] || lz.CountLex(&rg) != len(in) {
				t.Fatalf("op %d: lex range %+v: first/last/count wrong, want %q", op, rg, in)
			}
			if got := lz.RemoveLex(&rg); got != len(in) || lz.Len() != len(members)-len(in) {
				t.Fatalf("op %d: RemoveLex(%+v) = %d, want %d", op, rg, got, len(in))
			}
			checkZset(t, lz)
		case k == 8:
			sorted := sortedPairs(model)
			if len(sorted) == 0 {
				continue
			}
			a, b := r.IntN(len(sorted)), r.IntN(len(sorted))
			if a > b {
				a, b = b, a
			}
			if got := z.RemoveRank(a, b); got != b-a+1 {
				t.Fatalf("op %d: RemoveRank(%d, %d) = %d", op, a, b, got)
			}
			for _, p := range sorted[a : b+1] {
				delete(model, p.m)
			}
		default:
			sorted := sortedPairs(model)
			for i, p := range sorted {
				if n := z.ByRank(i); n == nil || n.member != p.m || n.score != p.s {
					t.Fatalf("op %d: ByRank(%d) wrong", op, i)
				}
				if rk, ok := z.Rank([]byte(p.m)); !ok || rk != i {
					t.Fatalf("op %d: Rank(%q) = %d %v, want %d", op, p.m, rk, ok, i)
				}
				if s, ok := z.Score([]byte(p.m)); !ok || s != p.s {
					t.Fatalf("op %d: Score(%q)", op, p.m)
				}
			}
			if z.ByRank(len(sorted)) != nil || z.ByRank(-1) != nil {
				t.Fatalf("op %d: ByRank out of range", op)
			}
			rg := randScoreRange(r)
			var wantFirst, wantLast *pair
			for i := range sorted {
				if scoreIn(rg, sorted[i].s) {
					if wantFirst == nil {
						wantFirst = &sorted[i]
					}
					wantLast = &sorted[i]
				}
			}
			first, last := z.FirstInScore(&rg), z.LastInScore(&rg)
			if (first == nil) != (wantFirst == nil) || (first != nil && first.member != wantFirst.m) ||
				(last == nil) != (wantLast == nil) || (last != nil && last.member != wantLast.m) {
				t.Fatalf("op %d: score range %+v first/last wrong", op, rg)
			}
		}
		if op%97 == 0 {
			checkZset(t, z)
		}
		if z.Len() != len(model) {
			t.Fatalf("op %d: Len %d, model %d", op, z.Len(), len(model))
		}
	}
	checkZset(t, z)
}

// TestZsetEncoding follows Redis's listpack→skiplist conversion: past 128
// members or with a member over 64 bytes, and never back.
func TestZsetEncoding(t *testing.T) {
	z := NewZset().Zset
	for i := range 128 {
		z.Set(fmt.Appendf(nil, "m%d", i), float64(i))
	}
	if z.Encoding() != "listpack" {
		t.Fatalf("128 members: %s", z.Encoding())
	}
	z.Set([]byte("one-more"), 1)
	if z.Encoding() != "skiplist" {
		t.Fatalf("129 members: %s", z.Encoding())
	}
	z.RemoveRank(0, 100)
	if z.Encoding() != "skiplist" {
		t.Fatal("converted back")
	}
	long := NewZset().Zset
	long.Set(make([]byte, 64), 1)
	if long.Encoding() != "listpack" {
		t.Fatal("64-byte member")
	}
	long.Set(make([]byte, 65), 1)
	if long.Encoding() != "skiplist" {
		t.Fatal("65-byte member")
	}
}

// TestZsetMemoryAccounting: the bytes a zset is accounted match the Go
// heap it holds, for big sets and for many small ones, within 15 %.
func TestZsetMemoryAccounting(t *testing.T) {
	for _, c := range []struct {
		name          string
		sets, members int
		memberLen     int
	}{
		{"big sets, short members", 4, 20000, 8},
		{"big sets, 40-byte members", 4, 10000, 40},
		{"small sets", 20000, 4, 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			heap := func() uint64 {
				runtime.GC()
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				return m.HeapAlloc
			}
			sets := make([]*Object, c.sets)
			before := heap()
			var accounted int64
			for i := range sets {
				o := NewZset()
				for j := range c.members {
					m := fmt.Appendf(nil, "%0*d", c.memberLen, j)
					o.Zset.Set(m, float64(j%1000))
				}
				sets[i] = o
				accounted += o.Bytes()
			}
			used := float64(heap() - before)
			ratio := float64(accounted) / used
			t.Logf("accounted %d bytes, heap grew %.0f: ratio %.3f (%.1f B/member heap, %.1f accounted)",
				accounted, used, ratio, used/float64(c.sets*c.members), float64(accounted)/float64(c.sets*c.members))
			if ratio < 0.85 || ratio > 1.15 {
				t.Errorf("accounting off by more than 15 %%: ratio %.3f", ratio)
			}
			runtime.KeepAlive(sets)
		})
	}
}

// TestNodeBlockLayout pins what ZNode.lv relies on: a block's extra links
// start right after the node's first, and a one-link node fills one 64-byte
// size class.
func TestNodeBlockLayout(t *testing.T) {
	var b nodeBlock[[7]zlevel]
	if got, want := unsafe.Offsetof(b.rest), unsafe.Offsetof(b.n.lv0)+unsafe.Sizeof(zlevel{}); got != want {
		t.Fatalf("extra links at offset %d, want %d (right after lv0)", got, want)
	}
	if s := unsafe.Sizeof(ZNode{}); s != 64 {
		t.Fatalf("a one-link node is %d bytes, want 64", s)
	}
	for h := 1; h <= zsetMaxLevel; h++ {
		n := newNode(h, float64(h), "m")
		for i := range h {
			n.lv(i).span = i + 1 // writes every link; -race's checkptr checks each stays in the object
		}
		for i := range h {
			if n.lv(i).span != i+1 {
				t.Fatalf("height %d: link %d reads %d", h, i, n.lv(i).span)
			}
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Fatalf("height %d: link %d did not panic", h, h)
				}
			}()
			n.lv(h)
		}()
	}
}

// TestZsetTallNodes links nodes of every height, the header growing to
// the largest, and checks the list after each change.
func TestZsetTallNodes(t *testing.T) {
	z := NewZset().Zset
	for h := zsetMaxLevel; h >= 1; h-- {
		m := fmt.Sprintf("m%02d", h)
		z.dict[m] = z.link(newNode(h, float64(h), m), float64(h), m)
		z.bytes += memberCost(len(m))
		checkZset(t, z)
	}
	if z.header.height != zsetMaxLevel || z.level != zsetMaxLevel {
		t.Fatalf("header height %d, levels in use %d, want %d", z.header.height, z.level, zsetMaxLevel)
	}
	for h := 1; h <= zsetMaxLevel; h += 3 {
		z.Set(fmt.Appendf(nil, "m%02d", h), float64(100-h)) // moves across the list
		checkZset(t, z)
	}
	for h := 1; h <= zsetMaxLevel; h++ {
		if !z.Remove(fmt.Appendf(nil, "m%02d", h)) {
			t.Fatalf("m%02d missing", h)
		}
		checkZset(t, z)
	}
	if z.level != 1 || z.Len() != 0 {
		t.Fatalf("empty set keeps %d levels, %d members", z.level, z.Len())
	}
}
