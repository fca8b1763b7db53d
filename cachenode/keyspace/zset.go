package keyspace

import (
	"math/bits"
	"math/rand/v2"
	"strings"
	"unsafe"
)

// Zset is the value of a sorted-set key: members ordered by (score,
// member bytes) in a skip list whose links carry spans (Redis's zskiplist,
// after Pugh), so rank, select-by-rank, score and lex ranges cost
// O(log n), plus a map from member to its node for O(1) ZSCORE and
// membership. The map's key and the node share one copy of the member.
//
// A Zset is owned by its Object's Entry: like every value, it is read and
// changed only under the entry's shard lock, and the caller runs
// Txn.Update after changing it so the memory accounting follows. Scores are
// never NaN (the command layer refuses them).
type Zset struct {
	dict   map[string]*ZNode
	header *ZNode // height grows with the tallest node; member and score unused
	tail   *ZNode
	length int
	level  int   // levels in use
	bytes  int64 // payload estimate for Object.Bytes
	// big records whether Redis would have converted this set from its
	// listpack encoding to a skip list (more than zsetListpackEntries
	// members, or a member longer than zsetListpackValue, at some point):
	// what OBJECT ENCODING reports. Redis never converts back.
	big bool
}

// ZNode is one member of a Zset. Nodes are valid until the next change of
// their set; read them under the entry's lock.
//
// A node's links are inline, after its fields, as Redis's zskiplistNode
// keeps its level array: lv0 is the last field, and a node of height h is
// allocated as a nodeBlock whose extra links follow it in the same object
// (newNode), so a node must never be copied (a copy keeps the height, not
// the links past the first). A search that moves onto a node then reads one cache line (a
// one-link node is exactly 64 bytes) instead of the node and, through a
// slice header, a separate array: the dependent second miss was a fifth of
// ZADD's CPU on a 100k-member set.
type ZNode struct {
	member   string
	score    float64
	backward *ZNode
	height   int
	lv0      [1]zlevel // first of height links; the rest follow in the block
}

// lv is n's link on level i, which must be below its height.
func (n *ZNode) lv(i int) *zlevel {
	if uint(i) >= uint(n.height) {
		panic("keyspace: zset link above a node's height")
	}
	// In bounds of n's allocation: newNode allocated height links from lv0.
	return (*zlevel)(unsafe.Add(unsafe.Pointer(&n.lv0[0]), uintptr(i)*unsafe.Sizeof(zlevel{})))
}

// zlevel is one link. It keeps a copy of the score of the node it points
// to, so a search reads the next node only when it moves onto it (or on a
// tie of scores): the node where a level's search stops is never touched,
// about a fifth of a search's cache misses on a large set.
type zlevel struct {
	forward *ZNode
	span    int     // nodes crossed by following forward (rank distance)
	score   float64 // forward's score (undefined when forward is nil)
}

// before reports whether l leads to a node that sorts before (score,
// member).
func (l *zlevel) before(score float64, member string) bool {
	f := l.forward
	return f != nil && (l.score < score || (l.score == score && f.member < member))
}

const (
	zsetMaxLevel = 32
	// Redis's zset-max-listpack-entries and zset-max-listpack-value
	// defaults: the size at which it reports "skiplist" instead of
	// "listpack".
	zsetListpackEntries = 128
	zsetListpackValue   = 64
)

// Memory accounting of a sorted set (see the costs in object.go),
// calibrated with runtime.MemStats (TestZsetMemoryAccounting): a member
// costs its node (mostly one link: the 64-byte size class), a map slot at
// typical load, and its own string allocation as the allocator rounds it
// (allocSize). An empty set costs the Zset with its two-link header and the
// map's first group; a header grown for a tall node (up to 896 bytes more,
// one node in 4^h is h links tall) is not counted.
const (
	zsetElemCost = 120
	zsetOverhead = 290
)

// NewZset returns an empty sorted set.
func NewZset() *Object {
	return &Object{Kind: KindZset, Zset: &Zset{dict: map[string]*ZNode{}, level: 1, header: newNode(2, 0, "")}}
}

// NewZsetOf returns an empty sorted set about to receive members members,
// the longest longest bytes: one Redis would build whole and then keep as a
// listpack only if small (a set operation's result, a loaded one), so its
// encoding, and whether it keeps -0, follows the final size from the start.
func NewZsetOf(members, longest int) *Object {
	o := NewZset()
	o.Zset.big = members > zsetListpackEntries || longest > zsetListpackValue
	return o
}

// Member is the node's member.
func (n *ZNode) Member() string { return n.member }

// Score is the node's score.
func (n *ZNode) Score() float64 { return n.score }

// Next is the node after n in (score, member) order, nil after the last.
func (n *ZNode) Next() *ZNode { return n.lv(0).forward }

// Prev is the node before n, nil before the first.
func (n *ZNode) Prev() *ZNode { return n.backward }

// Len is the number of members.
func (z *Zset) Len() int { return z.length }

// Bytes is the accounted payload.
func (z *Zset) Bytes() int64 { return zsetOverhead + z.bytes }

// Encoding is what Redis 7's OBJECT ENCODING would answer for this set.
func (z *Zset) Encoding() string {
	if z.big {
		return "skiplist"
	}
	return "listpack"
}

// First and Last are the lowest and highest members, nil when empty.
func (z *Zset) First() *ZNode { return z.header.lv(0).forward }
func (z *Zset) Last() *ZNode  { return z.tail }

// Score returns member's score.
func (z *Zset) Score(member []byte) (float64, bool) {
	n, ok := z.dict[string(member)]
	if !ok {
		return 0, false
	}
	return n.score, true
}

// Node returns member's node, nil when it is not in z.
func (z *Zset) Node(member []byte) *ZNode { return z.dict[string(member)] }

// Move gives n, a node of z, the score (Set for a member already found).
func (z *Zset) Move(n *ZNode, score float64) { z.update(n, score) }

// ScoreOf is Score for a member held as a string.
func (z *Zset) ScoreOf(member string) (float64, bool) {
	n, ok := z.dict[member]
	if !ok {
		return 0, false
	}
	return n.score, true
}

// Set gives member the score, adding it (a copy) when it is new; it
// reports whether it was added. score must not be NaN.
func (z *Zset) Set(member []byte, score float64) bool {
	if n, ok := z.dict[string(member)]; ok {
		z.update(n, score)
		return false
	}
	z.add(string(member), score)
	return true
}

// SetString is Set for a member held as a string (another set's).
func (z *Zset) SetString(member string, score float64) bool {
	if n, ok := z.dict[member]; ok {
		z.update(n, score)
		return false
	}
	z.add(strings.Clone(member), score)
	return true
}

// add inserts m, which z does not hold; m becomes z's.
func (z *Zset) add(m string, score float64) {
	if z.length+1 > zsetListpackEntries || len(m) > zsetListpackValue {
		z.big = true // Redis converts before it inserts
	}
	z.dict[m] = z.insert(z.stored(score), m)
	z.bytes += memberCost(len(m))
}

func (z *Zset) update(n *ZNode, score float64) {
	if n.score != score { // as Redis: -0 and 0 are the same score
		z.dict[n.member] = z.updateScore(n, z.stored(score))
	}
}

// stored is the score Redis keeps: its listpack holds an integral score
// as an integer, so a small set turns -0 into 0 (a skip list keeps -0).
func (z *Zset) stored(score float64) float64 {
	if score == 0 && !z.big {
		return 0
	}
	return score
}

func memberCost(n int) int64 { return zsetElemCost + allocSize(n) }

// allocSize approximates the bytes Go's allocator spends on an n-byte
// object (its size classes step by 8, then 16, then more).
func allocSize(n int) int64 {
	switch {
	case n == 0:
		return 0
	case n <= 32:
		return int64((n + 7) &^ 7)
	case n <= 256:
		return int64((n + 15) &^ 15)
	default:
		return int64((n + 63) &^ 63)
	}
}

// Remove deletes member; it reports whether it was present.
func (z *Zset) Remove(member []byte) bool {
	n, ok := z.dict[string(member)]
	if ok {
		z.RemoveNode(n)
	}
	return ok
}

// RemoveNode deletes n, a node of z.
func (z *Zset) RemoveNode(n *ZNode) {
	var update [zsetMaxLevel]*ZNode
	z.seek(n.score, n.member, &update)
	z.unlink(n, &update)
	delete(z.dict, n.member)
	z.bytes -= memberCost(len(n.member))
}

// Rank is member's 0-based rank in ascending order.
func (z *Zset) Rank(member []byte) (int, bool) {
	n, ok := z.dict[string(member)]
	if !ok {
		return 0, false
	}
	return z.rankOf(n) - 1, true
}

// RankOf is the 0-based rank of n, a node of z.
func (z *Zset) RankOf(n *ZNode) int { return z.rankOf(n) - 1 }

// ByRank returns the node of 0-based rank i, nil when out of range.
func (z *Zset) ByRank(i int) *ZNode {
	if i < 0 || i >= z.length {
		return nil
	}
	rank := i + 1
	x, traversed := z.header, 0
	for l := z.level - 1; l >= 0; l-- {
		for x.lv(l).forward != nil && traversed+x.lv(l).span <= rank {
			traversed += x.lv(l).span
			x = x.lv(l).forward
		}
		if traversed == rank {
			return x
		}
	}
	return nil
}

// randomLevel draws a node's height: each extra level with probability
// 1/4, as Redis's ZSKIPLIST_P, at most zsetMaxLevel.
func randomLevel() int {
	return 1 + bits.TrailingZeros64(rand.Uint64()|1<<62)/2
}

// nodeBlock is a node with the links after its first in the same object:
// rest starts where n ends, right after n.lv0 (TestNodeBlockLayout).
type nodeBlock[A any] struct {
	n    ZNode
	rest A
}

// newNode allocates a node of the given height (1 to zsetMaxLevel). Heights
// above 4 (one node in 256) round their block up to a few sizes.
func newNode(height int, score float64, member string) *ZNode {
	var n *ZNode
	switch {
	case height == 1:
		n = new(ZNode)
	case height == 2:
		n = &new(nodeBlock[[1]zlevel]).n
	case height == 3:
		n = &new(nodeBlock[[2]zlevel]).n
	case height == 4:
		n = &new(nodeBlock[[3]zlevel]).n
	case height <= 8:
		n = &new(nodeBlock[[7]zlevel]).n
	case height <= 16:
		n = &new(nodeBlock[[15]zlevel]).n
	case height <= zsetMaxLevel:
		n = &new(nodeBlock[[zsetMaxLevel - 1]zlevel]).n
	default:
		panic("keyspace: zset node height out of range")
	}
	n.height, n.score, n.member = height, score, member
	return n
}

// growHeader gives the header at least height links. Nothing links to the
// header (backward links stop at nil), so a bigger copy replaces it.
func (z *Zset) growHeader(height int) {
	h := newNode(min(max(height, 2*z.header.height), zsetMaxLevel), 0, "")
	for i := 0; i < z.header.height; i++ {
		*h.lv(i) = *z.header.lv(i)
	}
	z.header = h
}

// insert adds (score, member), which must not be in the list.
func (z *Zset) insert(score float64, member string) *ZNode {
	return z.link(nil, score, member)
}

// link puts a node for (score, member) in the list: reuse, an unlinked
// node with its levels, or a new one when reuse is nil.
func (z *Zset) link(reuse *ZNode, score float64, member string) *ZNode {
	level := randomLevel()
	if reuse != nil {
		level = reuse.height
	}
	if z.header.height < level {
		z.growHeader(level) // before the search: update must hold the header in use
	}
	var update [zsetMaxLevel]*ZNode
	var rank [zsetMaxLevel]int
	x := z.header
	for i := z.level - 1; i >= 0; i-- {
		if i < z.level-1 {
			rank[i] = rank[i+1]
		}
		for x.lv(i).before(score, member) {
			rank[i] += x.lv(i).span
			x = x.lv(i).forward
		}
		update[i] = x
	}
	if level > z.level {
		for i := z.level; i < level; i++ {
			rank[i] = 0
			update[i] = z.header
			*z.header.lv(i) = zlevel{span: z.length}
		}
		z.level = level
	}
	if x = reuse; x != nil {
		x.score, x.backward = score, nil
	} else {
		x = newNode(level, score, member)
	}
	for i := 0; i < level; i++ {
		x.lv(i).forward, x.lv(i).score = update[i].lv(i).forward, update[i].lv(i).score
		update[i].lv(i).forward, update[i].lv(i).score = x, score
		x.lv(i).span = update[i].lv(i).span - (rank[0] - rank[i])
		update[i].lv(i).span = rank[0] - rank[i] + 1
	}
	for i := level; i < z.level; i++ {
		update[i].lv(i).span++
	}
	if update[0] != z.header {
		x.backward = update[0]
	}
	if f := x.lv(0).forward; f != nil {
		f.backward = x
	} else {
		z.tail = x
	}
	z.length++
	return x
}

// seek fills update with the last node before (score, member) on every
// level and returns the node after them on level 0.
func (z *Zset) seek(score float64, member string, update *[zsetMaxLevel]*ZNode) *ZNode {
	x := z.header
	for i := z.level - 1; i >= 0; i-- {
		for x.lv(i).before(score, member) {
			x = x.lv(i).forward
		}
		update[i] = x
	}
	return x.lv(0).forward
}

// unlink removes x, whose predecessors are update, from the list.
func (z *Zset) unlink(x *ZNode, update *[zsetMaxLevel]*ZNode) {
	for i := 0; i < z.level; i++ {
		if update[i].lv(i).forward == x {
			update[i].lv(i).span += x.lv(i).span - 1
			update[i].lv(i).forward, update[i].lv(i).score = x.lv(i).forward, x.lv(i).score
		} else {
			update[i].lv(i).span--
		}
	}
	if f := x.lv(0).forward; f != nil {
		f.backward = x.backward
	} else {
		z.tail = x.backward
	}
	for z.level > 1 && z.header.lv(z.level-1).forward == nil {
		z.level--
	}
	z.length--
}

// updateScore moves n to score, as Redis's zslUpdateScore: in place when
// its neighbours keep it in order (the links into it updated), else
// unlinked and linked again where it belongs (Redis allocates a new node).
// It returns n.
func (z *Zset) updateScore(n *ZNode, score float64) *ZNode {
	var update [zsetMaxLevel]*ZNode
	inPlace := (n.backward == nil || n.backward.score < score) && (n.lv(0).forward == nil || n.lv(0).score > score)
	if inPlace && n.height == 1 { // its one link in is its predecessor's
		prev := n.backward
		if prev == nil {
			prev = z.header
		}
		n.score, prev.lv(0).score = score, score
		return n
	}
	z.seek(n.score, n.member, &update)
	if inPlace {
		n.score = score
		for i := range n.height {
			update[i].lv(i).score = score
		}
		return n
	}
	z.unlink(n, &update)
	return z.link(n, score, n.member)
}

// rankOf is the 1-based rank of n.
func (z *Zset) rankOf(n *ZNode) int {
	x, rank := z.header, 0
	for i := z.level - 1; i >= 0; i-- {
		for l := x.lv(i); l.forward != nil && (l.score < n.score || (l.score == n.score && l.forward.member <= n.member)); l = x.lv(i) {
			rank += l.span
			x = l.forward
		}
		if x == n {
			return rank
		}
	}
	return 0
}

// ScoreRange is a score interval; an Ex bound is open.
type ScoreRange struct {
	Min, Max     float64
	MinEx, MaxEx bool
}

func (r *ScoreRange) gteMin(v float64) bool {
	if r.MinEx {
		return v > r.Min
	}
	return v >= r.Min
}

func (r *ScoreRange) lteMax(v float64) bool {
	if r.MaxEx {
		return v < r.Max
	}
	return v <= r.Max
}

// Contains reports whether v is in the range.
func (r *ScoreRange) Contains(v float64) bool { return r.gteMin(v) && r.lteMax(v) }

// Empty reports whether no score can be in the range.
func (r *ScoreRange) Empty() bool {
	return r.Min > r.Max || (r.Min == r.Max && (r.MinEx || r.MaxEx))
}

// LexBound is one end of a member range: "-" (Inf < 0, below every
// member), "+" (Inf > 0, above every member), or a member, inclusive
// ("[m") or exclusive ("(m").
type LexBound struct {
	S   string
	Inf int8
	Ex  bool
}

// cmp compares member s with the bound: <0, 0, >0 as s sorts before, at,
// after it (Redis's sdscmplex).
func (b *LexBound) cmp(s string) int {
	switch {
	case b.Inf < 0:
		return 1
	case b.Inf > 0:
		return -1
	case s < b.S:
		return -1
	case s > b.S:
		return 1
	}
	return 0
}

// LexRange is a member interval (ZRANGEBYLEX). Ordering by member only
// makes sense when every score is equal, as in Redis.
type LexRange struct{ Min, Max LexBound }

func (r *LexRange) gteMin(s string) bool {
	c := r.Min.cmp(s)
	if r.Min.Ex {
		return c > 0
	}
	return c >= 0
}

func (r *LexRange) lteMax(s string) bool {
	c := r.Max.cmp(s)
	if r.Max.Ex {
		return c < 0
	}
	return c <= 0
}

// Contains reports whether member s is in the range.
func (r *LexRange) Contains(s string) bool { return r.gteMin(s) && r.lteMax(s) }

// Empty reports whether no member can be in the range.
func (r *LexRange) Empty() bool {
	var c int
	switch {
	case r.Min.Inf != 0 && r.Min.Inf == r.Max.Inf:
		c = 0
	case r.Min.Inf < 0 || r.Max.Inf > 0:
		c = -1
	case r.Min.Inf > 0 || r.Max.Inf < 0:
		c = 1
	case r.Min.S < r.Max.S:
		c = -1
	case r.Min.S > r.Max.S:
		c = 1
	}
	return c > 0 || (c == 0 && (r.Min.Ex || r.Max.Ex))
}

// FirstInScore is the lowest node in r, nil when none is.
func (z *Zset) FirstInScore(r *ScoreRange) *ZNode {
	if r.Empty() || z.tail == nil || !r.gteMin(z.tail.score) || !r.lteMax(z.First().score) {
		return nil
	}
	x := z.header
	for i := z.level - 1; i >= 0; i-- {
		for x.lv(i).forward != nil && !r.gteMin(x.lv(i).score) {
			x = x.lv(i).forward
		}
	}
	x = x.lv(0).forward
	if x == nil || !r.lteMax(x.score) {
		return nil
	}
	return x
}

// LastInScore is the highest node in r, nil when none is.
func (z *Zset) LastInScore(r *ScoreRange) *ZNode {
	if r.Empty() || z.tail == nil || !r.gteMin(z.tail.score) || !r.lteMax(z.First().score) {
		return nil
	}
	x := z.header
	for i := z.level - 1; i >= 0; i-- {
		for x.lv(i).forward != nil && r.lteMax(x.lv(i).score) {
			x = x.lv(i).forward
		}
	}
	if x == z.header || !r.gteMin(x.score) {
		return nil
	}
	return x
}

// FirstInLex is the lowest node in r, nil when none is.
func (z *Zset) FirstInLex(r *LexRange) *ZNode {
	if r.Empty() || z.tail == nil || !r.gteMin(z.tail.member) || !r.lteMax(z.First().member) {
		return nil
	}
	x := z.header
	for i := z.level - 1; i >= 0; i-- {
		for f := x.lv(i).forward; f != nil && !r.gteMin(f.member); f = x.lv(i).forward {
			x = f
		}
	}
	x = x.lv(0).forward
	if x == nil || !r.lteMax(x.member) {
		return nil
	}
	return x
}

// LastInLex is the highest node in r, nil when none is.
func (z *Zset) LastInLex(r *LexRange) *ZNode {
	if r.Empty() || z.tail == nil || !r.gteMin(z.tail.member) || !r.lteMax(z.First().member) {
		return nil
	}
	x := z.header
	for i := z.level - 1; i >= 0; i-- {
		for f := x.lv(i).forward; f != nil && r.lteMax(f.member); f = x.lv(i).forward {
			x = f
		}
	}
	if x == z.header || !r.gteMin(x.member) {
		return nil
	}
	return x
}

// CountScore and CountLex are the number of members in r.
func (z *Zset) CountScore(r *ScoreRange) int {
	first := z.FirstInScore(r)
	if first == nil {
		return 0
	}
	return z.rankOf(z.LastInScore(r)) - z.rankOf(first) + 1
}

func (z *Zset) CountLex(r *LexRange) int {
	first := z.FirstInLex(r)
	if first == nil {
		return 0
	}
	return z.rankOf(z.LastInLex(r)) - z.rankOf(first) + 1
}

// ScoreWindow and LexWindow select LIMIT offset count from the members in
// r walked upwards (or downwards with reverse): they return the first
// member of the window and how many follow it that way. As in Redis, a
// negative offset selects nothing and a negative count everything.
func (z *Zset) ScoreWindow(r *ScoreRange, offset, count int64, reverse bool) (*ZNode, int) {
	return window(z, *r, offset, count, reverse)
}

func (z *Zset) LexWindow(r *LexRange, offset, count int64, reverse bool) (*ZNode, int) {
	return window(z, *r, offset, count, reverse)
}

// span is a ScoreRange or a LexRange, for window. They are passed by value
// so that window is compiled once per range type with direct calls (a
// pointer type argument goes through a dictionary, and the caller's range
// escapes to the heap).
type span interface {
	first(z *Zset) *ZNode
	last(z *Zset) *ZNode
	holds(x *ZNode) bool
}

func (r ScoreRange) first(z *Zset) *ZNode { return z.FirstInScore(&r) }
func (r ScoreRange) last(z *Zset) *ZNode  { return z.LastInScore(&r) }
func (r ScoreRange) holds(x *ZNode) bool  { return r.Contains(x.score) }
func (r LexRange) first(z *Zset) *ZNode   { return z.FirstInLex(&r) }
func (r LexRange) last(z *Zset) *ZNode    { return z.LastInLex(&r) }
func (r LexRange) holds(x *ZNode) bool    { return r.Contains(x.member) }

// Past these, window jumps by rank instead of walking: an offset costs
// two O(log n) lookups, and counting an unlimited (or large) window two
// more, instead of walks as long as themselves.
const (
	walkOffset = 64
	walkCount  = 256
)

func window[R span](z *Zset, r R, offset, count int64, reverse bool) (*ZNode, int) {
	if offset < 0 || offset >= int64(z.length) {
		return nil, 0
	}
	var x *ZNode
	if reverse {
		x = r.last(z)
	} else {
		x = r.first(z)
	}
	if x == nil {
		return nil, 0
	}
	if offset <= walkOffset {
		for ; x != nil && offset > 0; offset-- {
			x = x.step(reverse)
		}
	} else if reverse {
		x = z.ByRank(z.RankOf(x) - int(offset))
	} else {
		x = z.ByRank(z.RankOf(x) + int(offset))
	}
	if x == nil || !r.holds(x) {
		return nil, 0
	}
	if count >= 0 && count <= walkCount {
		n := 0
		for y := x; y != nil && int64(n) < count && r.holds(y); y = y.step(reverse) {
			n++
		}
		return x, n
	}
	var n int64
	if reverse {
		n = int64(z.rankOf(x) - z.rankOf(r.first(z)))
	} else {
		n = int64(z.rankOf(r.last(z)) - z.rankOf(x))
	}
	n++
	if count >= 0 {
		n = min(n, count)
	}
	return x, int(n)
}

func (x *ZNode) step(reverse bool) *ZNode {
	if reverse {
		return x.backward
	}
	return x.lv(0).forward
}

// removeFrom deletes nodes from x on while in(x), update being the
// predecessors of x; it returns how many it deleted.
func (z *Zset) removeFrom(x *ZNode, update *[zsetMaxLevel]*ZNode, in func(*ZNode) bool) int {
	removed := 0
	for x != nil && in(x) {
		next := x.lv(0).forward
		z.unlink(x, update)
		delete(z.dict, x.member)
		z.bytes -= memberCost(len(x.member))
		removed++
		x = next
	}
	return removed
}

// RemoveScore, RemoveLex and RemoveRank delete the members in a range
// (RemoveRank: 0-based ranks start..stop inclusive, already clamped to
// the set) and return how many they deleted.
func (z *Zset) RemoveScore(r *ScoreRange) int {
	var update [zsetMaxLevel]*ZNode
	x := z.header
	for i := z.level - 1; i >= 0; i-- {
		for x.lv(i).forward != nil && !r.gteMin(x.lv(i).score) {
			x = x.lv(i).forward
		}
		update[i] = x
	}
	return z.removeFrom(x.lv(0).forward, &update, func(n *ZNode) bool { return r.lteMax(n.score) })
}

func (z *Zset) RemoveLex(r *LexRange) int {
	if r.Empty() {
		return 0
	}
	var update [zsetMaxLevel]*ZNode
	x := z.header
	for i := z.level - 1; i >= 0; i-- {
		for f := x.lv(i).forward; f != nil && !r.gteMin(f.member); f = x.lv(i).forward {
			x = f
		}
		update[i] = x
	}
	return z.removeFrom(x.lv(0).forward, &update, func(n *ZNode) bool { return r.lteMax(n.member) })
}

func (z *Zset) RemoveRank(start, stop int) int {
	if start < 0 || stop >= z.length || start > stop {
		return 0
	}
	var update [zsetMaxLevel]*ZNode
	x, traversed := z.header, 0
	for i := z.level - 1; i >= 0; i-- {
		for x.lv(i).forward != nil && traversed+x.lv(i).span < start+1 {
			traversed += x.lv(i).span
			x = x.lv(i).forward
		}
		update[i] = x
	}
	rank := start
	return z.removeFrom(x.lv(0).forward, &update, func(*ZNode) bool {
		rank++
		return rank <= stop+1
	})
}
