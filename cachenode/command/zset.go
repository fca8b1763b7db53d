package command

import (
	"bytes"
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/portico-io/portico/cachenode/keyspace"
	"github.com/portico-io/portico/cachenode/resp"
)

// Sorted sets, ZADD to ZSCAN, as Redis 7.0 runs them: the same replies
// (RESP2 flat member/score lists; RESP3 doubles and [member, score]
// pairs), the same error strings and the same order of checks (options,
// then numbers, then the key's type), so a client cannot tell the two
// apart. The structure is keyspace.Zset: a skip list with spans plus a
// member map, so ranks, ranges and counts cost O(log n).

const (
	errMinMaxFloat = "ERR min or max is not a float"
	errMinMaxLex   = "ERR min or max not valid string range item"
	errNaNScore    = "ERR resulting score is not a number (NaN)"
	errWeight      = "ERR weight value is not a float"
	errLimitRank   = "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
	errLexScores   = "ERR syntax error, WITHSCORES not supported in combination with BYLEX"
	errLimitNeg    = "ERR LIMIT can't be negative"
)

func init() {
	const g = "sorted-set"
	mk := flagMovableKeys
	reg("zadd", -4, wdf, 1, 1, 1, g, "1.2.0", ksRWUpdate, "Adds one or more members to a sorted set, or updates their scores.", cmdZAdd)
	reg("zincrby", 4, wdf, 1, 1, 1, g, "1.2.0", ksRWUpdate, "Increments the score of a member in a sorted set.", cmdZIncrBy)
	reg("zrem", -3, wf, 1, 1, 1, g, "1.2.0", ksRWDelete, "Removes one or more members from a sorted set.", cmdZRem)
	reg("zcard", 2, rf, 1, 1, 1, g, "1.2.0", []string{"RO"}, "Returns the number of members in a sorted set.", cmdZCard)
	reg("zscore", 3, rf, 1, 1, 1, g, "1.2.0", ksRO, "Returns the score of a member in a sorted set.", cmdZScore)
	reg("zmscore", -3, rf, 1, 1, 1, g, "6.2.0", ksRO, "Returns the score of one or more members in a sorted set.", cmdZMScore)
	reg("zrank", 3, rf, 1, 1, 1, g, "2.0.0", ksRO, "Returns the index of a member in a sorted set ordered by ascending scores.", cmdZRank)
	reg("zrevrank", 3, rf, 1, 1, 1, g, "2.0.0", ksRO, "Returns the index of a member in a sorted set ordered by descending scores.", cmdZRevRank)
	reg("zcount", 4, rf, 1, 1, 1, g, "2.0.0", ksRO, "Returns the count of members in a sorted set that have scores within a range.", cmdZCount)
	reg("zlexcount", 4, rf, 1, 1, 1, g, "2.8.9", ksRO, "Returns the number of members in a sorted set within a lexicographical range.", cmdZLexCount)
	reg("zrange", -4, flagReadonly, 1, 1, 1, g, "1.2.0", ksRO, "Returns members in a sorted set within a range of indexes, scores or members.", cmdZRange)
	reg("zrangestore", -5, wd, 1, 2, 1, g, "6.2.0", ksOW, "Stores a range of members from sorted set in a key.", cmdZRangeStore)
	reg("zrevrange", -4, flagReadonly, 1, 1, 1, g, "1.2.0", ksRO, "Returns members in a sorted set within a range of indexes in reverse order.", cmdZRevRange)
	reg("zrangebyscore", -4, flagReadonly, 1, 1, 1, g, "1.0.5", ksRO, "Returns members in a sorted set within a range of scores.", cmdZRangeByScore)
	reg("zrevrangebyscore", -4, flagReadonly, 1, 1, 1, g, "2.2.0", ksRO, "Returns members in a sorted set within a range of scores in reverse order.", cmdZRevRangeByScore)
	reg("zrangebylex", -4, flagReadonly, 1, 1, 1, g, "2.8.9", ksRO, "Returns members in a sorted set within a lexicographical range.", cmdZRangeByLex)
	reg("zrevrangebylex", -4, flagReadonly, 1, 1, 1, g, "2.8.9", ksRO, "Returns members in a sorted set within a lexicographical range in reverse order.", cmdZRevRangeByLex)
	reg("zremrangebyrank", 4, flagWrite, 1, 1, 1, g, "2.0.0", ksRWDelete, "Removes members in a sorted set within a range of indexes.", cmdZRemRangeByRank)
	reg("zremrangebyscore", 4, flagWrite, 1, 1, 1, g, "1.2.0", ksRWDelete, "Removes members in a sorted set within a range of scores.", cmdZRemRangeByScore)
	reg("zremrangebylex", 4, flagWrite, 1, 1, 1, g, "2.8.9", ksRWDelete, "Removes members in a sorted set within a lexicographical range.", cmdZRemRangeByLex)
	reg("zpopmin", -2, wf, 1, 1, 1, g, "5.0.0", ksRWDelete, "Returns the lowest-scoring members from a sorted set after removing them.", cmdZPopMin)
	reg("zpopmax", -2, wf, 1, 1, 1, g, "5.0.0", ksRWDelete, "Returns the highest-scoring members from a sorted set after removing them.", cmdZPopMax)
	reg("zrandmember", -2, flagReadonly, 1, 1, 1, g, "6.2.0", ksRO, "Returns one or more random members from a sorted set.", cmdZRandMember)
	reg("zscan", -3, flagReadonly, 1, 1, 1, g, "2.8.0", ksRO, "Iterates over members and scores of a sorted set.", cmdZScan)
	// The set operations name their keys with a count (numkeys).
	reg("zunion", -3, flagReadonly|mk, 0, 0, 0, g, "6.2.0", ksRO, "Returns the union of multiple sorted sets.", cmdZUnion)
	reg("zinter", -3, flagReadonly|mk, 0, 0, 0, g, "6.2.0", ksRO, "Returns the intersect of multiple sorted sets.", cmdZInter)
	reg("zdiff", -3, flagReadonly|mk, 0, 0, 0, g, "6.2.0", ksRO, "Returns the difference between multiple sorted sets.", cmdZDiff)
	reg("zintercard", -3, flagReadonly|mk, 0, 0, 0, g, "7.0.0", ksRO, "Returns the number of members of the intersect of multiple sorted sets.", cmdZInterCard)
	reg("zunionstore", -4, wd|mk, 1, 1, 1, g, "2.0.0", ksOW, "Stores the union of multiple sorted sets in a key.", cmdZUnionStore)
	reg("zinterstore", -4, wd|mk, 1, 1, 1, g, "2.0.0", ksOW, "Stores the intersect of multiple sorted sets in a key.", cmdZInterStore)
	reg("zdiffstore", -4, wd|mk, 1, 1, 1, g, "6.2.0", ksOW, "Stores the difference of multiple sorted sets in a key.", cmdZDiffStore)
	for _, name := range []string{"zunion", "zinter", "zdiff", "zintercard"} {
		table[name].getKeys = numkeysKeys(1)
	}
	for _, name := range []string{"zunionstore", "zinterstore", "zdiffstore"} {
		table[name].getKeys = numkeysKeys(2)
	}
}

// numkeysKeys finds the keys of a command whose keys are a count at
// args[at] and that many keys after it, preceded by a destination
// (args[1]) when at is 2. A count the handler refuses yields no keys, as
// Redis's key specs do, so the command answers its own error.
func numkeysKeys(at int) func(args, buf [][]byte) [][]byte {
	return func(args, buf [][]byte) [][]byte {
		if at >= len(args) {
			return buf
		}
		n, ok := atoi(args[at])
		if !ok || n < 1 || n > int64(len(args)-at-1) {
			return buf
		}
		if at == 2 {
			buf = append(buf, args[1])
		}
		return append(buf, args[at+1:at+1+int(n)]...)
	}
}

// optIs reports whether arg is the option name (lower-case letters) in
// any case, without allocating.
func optIs(arg []byte, name string) bool { return len(arg) == len(name) && hasPrefixFold(arg, name) }

// zsetAt returns the sorted set at key (nil when missing), replying
// WRONGTYPE (ok=false) for another type. read counts a hit or a miss.
func zsetAt(c *Ctx, key []byte, read bool) (*keyspace.Entry, *keyspace.Zset, bool) {
	e, ok := c.objectAt(key, keyspace.KindZset, read)
	if !ok || e == nil {
		return nil, nil, ok
	}
	return e, e.Obj.Zset, true
}

// scoredArray writes the header of n members, with their scores: a flat
// array of 2n in RESP2, n [member, score] pairs in RESP3.
func scoredArray(c *Ctx, n int, withscores bool) {
	if withscores && c.W.Proto != 3 {
		c.W.Array(2 * n)
		return
	}
	c.W.Array(n)
}

func writeScored(c *Ctx, member string, score float64, withscores bool) {
	if withscores && c.W.Proto == 3 {
		c.W.Array(2)
	}
	c.W.BulkString(member)
	if withscores {
		c.W.Double(score)
	}
}

// --- ZADD, ZINCRBY, ZREM ---

func cmdZAdd(c *Ctx)    { zadd(c, false) }
func cmdZIncrBy(c *Ctx) { zadd(c, true) }

// zadd is Redis's zaddGenericCommand; ZINCRBY is ZADD INCR (and parses
// ZADD's options too, as Redis does).
func zadd(c *Ctx, incr bool) {
	key := c.Args[1]
	var nx, xx, gt, lt, ch bool
	idx := 2
options:
	for ; idx < len(c.Args); idx++ {
		a := c.Args[idx]
		switch {
		case optIs(a, "nx"):
			nx = true
		case optIs(a, "xx"):
			xx = true
		case optIs(a, "ch"):
			ch = true
		case optIs(a, "incr"):
			incr = true
		case optIs(a, "gt"):
			gt = true
		case optIs(a, "lt"):
			lt = true
		default:
			break options
		}
	}
	elements := len(c.Args) - idx
	if elements%2 != 0 || elements == 0 {
		c.W.Error(errSyntax)
		return
	}
	elements /= 2
	switch {
	case nx && xx:
		c.W.Error("ERR XX and NX options at the same time are not compatible")
		return
	case (gt && nx) || (lt && nx) || (gt && lt):
		c.W.Error("ERR GT, LT, and/or NX options at the same time are not compatible")
		return
	case incr && elements > 1:
		c.W.Error("ERR INCR option supports a single increment-element pair")
		return
	}
	var room [8]float64
	scores := room[:0]
	for j := range elements {
		s, ok := parseScore(c.Args[idx+2*j])
		if !ok {
			c.W.Error(errNotFloat)
			return
		}
		scores = append(scores, s)
	}
	for j := range elements {
		if !c.valueOK(len(c.Args[idx+2*j+1])) {
			return
		}
	}
	e, z, ok := zsetAt(c, key, false)
	if !ok {
		return
	}
	var added, updated, processed int64
	var score float64
	if z == nil && !xx {
		e = c.Tx.SetObject(key, keyspace.NewZset(), c.defaultExpire())
		z = e.Obj.Zset
		c.signal(key) // clients blocked on it (BZPOPMIN) wake once the command, or EXEC, is done
	}
	for j := 0; z != nil && j < elements; j++ {
		member := c.Args[idx+2*j+1]
		score = scores[j]
		n := z.Node(member)
		switch {
		case n != nil && nx, n == nil && xx:
			continue
		case n != nil:
			cur := n.Score()
			if incr {
				if score += cur; math.IsNaN(score) {
					c.W.Error(errNaNScore)
					return
				}
			}
			if (lt && score >= cur) || (gt && score <= cur) {
				continue
			}
			if score != cur {
				z.Move(n, score)
				updated++
			}
		default:
			z.Set(member, score)
			added++
		}
		processed++
	}
	if added+updated > 0 {
		c.Tx.Update(key, e)
	}
	switch {
	case incr && processed > 0:
		c.W.Double(score)
	case incr:
		c.W.Null()
	case ch:
		c.W.Int(added + updated)
	default:
		c.W.Int(added)
	}
}

func cmdZRem(c *Ctx) {
	key := c.Args[1]
	e, z, ok := zsetAt(c, key, false)
	if !ok {
		return
	}
	var deleted int64
	if z != nil {
		for _, m := range c.Args[2:] {
			if z.Remove(m) {
				deleted++
			}
			if z.Len() == 0 {
				break
			}
		}
		if deleted > 0 {
			c.Tx.Update(key, e)
		}
	}
	c.W.Int(deleted)
}

// --- single-member reads ---

func cmdZCard(c *Ctx) {
	_, z, ok := zsetAt(c, c.Args[1], true)
	if !ok {
		return
	}
	if z == nil {
		c.W.Int(0)
		return
	}
	c.W.Int(int64(z.Len()))
}

func cmdZScore(c *Ctx) {
	_, z, ok := zsetAt(c, c.Args[1], true)
	if !ok {
		return
	}
	if z != nil {
		if s, in := z.Score(c.Args[2]); in {
			c.W.Double(s)
			return
		}
	}
	c.W.Null()
}

func cmdZMScore(c *Ctx) {
	_, z, ok := zsetAt(c, c.Args[1], true)
	if !ok {
		return
	}
	c.W.Array(len(c.Args) - 2)
	for _, m := range c.Args[2:] {
		if z != nil {
			if s, in := z.Score(m); in {
				c.W.Double(s)
				continue
			}
		}
		c.W.Null()
	}
}

func cmdZRank(c *Ctx)    { zrank(c, false) }
func cmdZRevRank(c *Ctx) { zrank(c, true) }

func zrank(c *Ctx, reverse bool) {
	_, z, ok := zsetAt(c, c.Args[1], true)
	if !ok {
		return
	}
	if z != nil {
		if r, in := z.Rank(c.Args[2]); in {
			if reverse {
				r = z.Len() - 1 - r
			}
			c.W.Int(int64(r))
			return
		}
	}
	c.W.Null()
}

func cmdZCount(c *Ctx) {
	r, ok := parseScoreRange(c.Args[2], c.Args[3])
	if !ok {
		c.W.Error(errMinMaxFloat)
		return
	}
	_, z, ok := zsetAt(c, c.Args[1], true)
	if !ok {
		return
	}
	if z == nil {
		c.W.Int(0)
		return
	}
	c.W.Int(int64(z.CountScore(&r)))
}

func cmdZLexCount(c *Ctx) {
	r, ok := parseLexRange(c.Args[2], c.Args[3])
	if !ok {
		c.W.Error(errMinMaxLex)
		return
	}
	_, z, ok := zsetAt(c, c.Args[1], true)
	if !ok {
		return
	}
	if z == nil {
		c.W.Int(0)
		return
	}
	c.W.Int(int64(z.CountLex(&r)))
}

// --- ZRANGE and its older forms ---

type rangeBy uint8

const (
	byAuto rangeBy = iota
	byRank
	byScore
	byLex
)

type rangeDir uint8

const (
	dirAuto rangeDir = iota
	dirForward
	dirReverse
)

func cmdZRange(c *Ctx)      { zrangeGeneric(c, 1, false, byAuto, dirAuto) }
func cmdZRangeStore(c *Ctx) { zrangeGeneric(c, 2, true, byAuto, dirAuto) }
func cmdZRevRange(c *Ctx)   { zrangeGeneric(c, 1, false, byRank, dirReverse) }
func cmdZRangeByScore(c *Ctx) {
	zrangeGeneric(c, 1, false, byScore, dirForward)
}
func cmdZRevRangeByScore(c *Ctx) {
	zrangeGeneric(c, 1, false, byScore, dirReverse)
}
func cmdZRangeByLex(c *Ctx)    { zrangeGeneric(c, 1, false, byLex, dirForward) }
func cmdZRevRangeByLex(c *Ctx) { zrangeGeneric(c, 1, false, byLex, dirReverse) }

// zrangeGeneric is Redis's zrangeGenericCommand: args[at] is the source,
// then min, max and the options the command allows (by and dir already
// fixed by the older commands). With store, args[1] receives the range.
func zrangeGeneric(c *Ctx, at int, store bool, by rangeBy, dir rangeDir) {
	minIdx, maxIdx := at+1, at+2
	withscores := false
	offset, limit := int64(0), int64(-1)
	for j := at + 3; j < len(c.Args); j++ {
		a, left := c.Args[j], len(c.Args)-j-1
		switch {
		case !store && optIs(a, "withscores"):
			withscores = true
		case optIs(a, "limit") && left >= 2:
			var ok1, ok2 bool
			offset, ok1 = atoi(c.Args[j+1])
			limit, ok2 = atoi(c.Args[j+2])
			if !ok1 || !ok2 {
				c.W.Error(errNotInt)
				return
			}
			j += 2
		case dir == dirAuto && optIs(a, "rev"):
			dir = dirReverse
		case by == byAuto && optIs(a, "bylex"):
			by = byLex
		case by == byAuto && optIs(a, "byscore"):
			by = byScore
		default:
			c.W.Error(errSyntax)
			return
		}
	}
	if by == byAuto {
		by = byRank
	}
	reverse := dir == dirReverse
	if limit != -1 && by == byRank {
		c.W.Error(errLimitRank)
		return
	}
	if withscores && by == byLex {
		c.W.Error(errLexScores)
		return
	}
	if reverse && by != byRank {
		minIdx, maxIdx = maxIdx, minIdx // given as max, min
	}
	var (
		start, stop int64
		sr          keyspace.ScoreRange
		lr          keyspace.LexRange
		ok          bool
	)
	switch by {
	case byRank:
		var ok2 bool
		start, ok = atoi(c.Args[minIdx])
		stop, ok2 = atoi(c.Args[maxIdx])
		if !ok || !ok2 {
			c.W.Error(errNotInt)
			return
		}
	case byScore:
		if sr, ok = parseScoreRange(c.Args[minIdx], c.Args[maxIdx]); !ok {
			c.W.Error(errMinMaxFloat)
			return
		}
	case byLex:
		if lr, ok = parseLexRange(c.Args[minIdx], c.Args[maxIdx]); !ok {
			c.W.Error(errMinMaxLex)
			return
		}
	}
	_, z, ok := zsetAt(c, c.Args[at], true)
	if !ok {
		return
	}
	var first *keyspace.ZNode
	n := 0
	if z != nil {
		switch by {
		case byRank:
			first, n = rankSpan(z, start, stop, reverse)
		case byScore:
			first, n = z.ScoreWindow(&sr, offset, limit, reverse)
		case byLex:
			first, n = z.LexWindow(&lr, offset, limit, reverse)
		}
	}
	if store {
		storeRange(c, c.Args[1], first, n, reverse)
		return
	}
	scoredArray(c, n, withscores)
	for x := first; n > 0; n-- {
		writeScored(c, x.Member(), x.Score(), withscores)
		x = step(x, reverse)
	}
}

func step(x *keyspace.ZNode, reverse bool) *keyspace.ZNode {
	if reverse {
		return x.Prev()
	}
	return x.Next()
}

// rankSpan turns ZRANGE's start and stop (negative from the end) into the
// first node and a count, in the direction asked.
func rankSpan(z *keyspace.Zset, start, stop int64, reverse bool) (*keyspace.ZNode, int) {
	from, to, ok := ranks(start, stop, z.Len())
	switch {
	case !ok:
		return nil, 0
	case reverse:
		return z.ByRank(z.Len() - 1 - from), to - from + 1
	}
	return z.ByRank(from), to - from + 1
}

// ranks clamps start..stop (inclusive, negative from the end) to a set of
// n members, as Redis does; ok is false when nothing is left.
func ranks(start, stop int64, n int) (from, to int, ok bool) {
	l := int64(n)
	if start < 0 {
		start += l
	}
	if stop < 0 {
		stop += l
	}
	start = max(start, 0)
	if start > stop || start >= l {
		return 0, 0, false
	}
	return int(start), int(min(stop, l-1)), true
}

// storeRange makes dst a sorted set of the n nodes from first (ZRANGESTORE):
// replacing whatever dst held, or deleting it when n is 0.
func storeRange(c *Ctx, dst []byte, first *keyspace.ZNode, n int, reverse bool) {
	if n == 0 {
		c.Tx.Delete(dst)
		c.W.Int(0)
		return
	}
	o := keyspace.NewZset()
	for x := first; x != nil && o.Zset.Len() < n; x = step(x, reverse) {
		o.Zset.SetString(x.Member(), x.Score())
	}
	c.Tx.SetObject(dst, o, c.defaultExpire())
	c.signal(dst)
	c.W.Int(int64(n))
}

// --- removals ---

func cmdZRemRangeByRank(c *Ctx)  { zremrange(c, byRank) }
func cmdZRemRangeByScore(c *Ctx) { zremrange(c, byScore) }
func cmdZRemRangeByLex(c *Ctx)   { zremrange(c, byLex) }

func zremrange(c *Ctx, by rangeBy) {
	key := c.Args[1]
	var (
		start, stop int64
		sr          keyspace.ScoreRange
		lr          keyspace.LexRange
		ok          bool
	)
	switch by {
	case byRank:
		var ok2 bool
		start, ok = atoi(c.Args[2])
		stop, ok2 = atoi(c.Args[3])
		if !ok || !ok2 {
			c.W.Error(errNotInt)
			return
		}
	case byScore:
		if sr, ok = parseScoreRange(c.Args[2], c.Args[3]); !ok {
			c.W.Error(errMinMaxFloat)
			return
		}
	default:
		if lr, ok = parseLexRange(c.Args[2], c.Args[3]); !ok {
			c.W.Error(errMinMaxLex)
			return
		}
	}
	e, z, ok := zsetAt(c, key, false)
	if !ok {
		return
	}
	if z == nil {
		c.W.Int(0)
		return
	}
	deleted := 0
	switch by {
	case byRank:
		if from, to, ok := ranks(start, stop, z.Len()); ok {
			deleted = z.RemoveRank(from, to)
		}
	case byScore:
		deleted = z.RemoveScore(&sr)
	default:
		deleted = z.RemoveLex(&lr)
	}
	if deleted > 0 {
		c.Tx.Update(key, e)
	}
	c.W.Int(int64(deleted))
}

func cmdZPopMin(c *Ctx) { zpop(c, false) }
func cmdZPopMax(c *Ctx) { zpop(c, true) }

// zpop is ZPOPMIN/ZPOPMAX: without a count a flat [member, score]; with
// one, RESP3 nests the pairs.
func zpop(c *Ctx, highest bool) {
	if len(c.Args) > 3 {
		c.W.Error(errSyntax)
		return
	}
	count := int64(-1)
	if len(c.Args) == 3 {
		n, ok := atoi(c.Args[2])
		if !ok || n < 0 {
			c.W.Error(errPositive)
			return
		}
		count = n
	}
	key := c.Args[1]
	e, z, ok := zsetAt(c, key, false)
	if !ok {
		return
	}
	if z == nil || count == 0 {
		c.W.Array(0)
		return
	}
	nested := c.W.Proto == 3 && count != -1
	n := int(min(max(count, 1), int64(z.Len())))
	if nested {
		c.W.Array(n)
	} else {
		c.W.Array(2 * n)
	}
	for range n {
		x := z.First()
		if highest {
			x = z.Last()
		}
		if nested {
			c.W.Array(2)
		}
		c.W.BulkString(x.Member())
		c.W.Double(x.Score())
		z.RemoveNode(x)
	}
	c.Tx.Update(key, e)
}

// maxRandomPicks bounds a ZRANDMEMBER with a negative count (repeats
// allowed), whose reply Redis would build whatever its size; SRANDMEMBER
// has the same bound.
const maxRandomPicks = 1 << 20

func cmdZRandMember(c *Ctx) {
	if len(c.Args) < 3 {
		_, z, ok := zsetAt(c, c.Args[1], true)
		if !ok {
			return
		}
		if z == nil {
			c.W.Null()
			return
		}
		x := z.ByRank(rand.IntN(z.Len()))
		c.W.BulkString(x.Member())
		return
	}
	l, ok := atoi(c.Args[2])
	if !ok {
		c.W.Error(errNotInt)
		return
	}
	if l == math.MinInt64 {
		c.W.Error("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
		return
	}
	if len(c.Args) > 4 || (len(c.Args) == 4 && !optIs(c.Args[3], "withscores")) {
		c.W.Error(errSyntax)
		return
	}
	withscores := len(c.Args) == 4
	if withscores && (l < -math.MaxInt64/2 || l > math.MaxInt64/2) {
		c.W.Error("ERR value is out of range")
		return
	}
	_, z, ok := zsetAt(c, c.Args[1], true)
	if !ok {
		return
	}
	if z == nil || l == 0 {
		c.W.Array(0)
		return
	}
	size := z.Len()
	if l < 0 || l == 1 { // picks may repeat
		count := l
		if count < 0 {
			count = -count
		}
		if count > maxRandomPicks {
			c.W.Error(errPositive)
			return
		}
		scoredArray(c, int(count), withscores)
		for range count {
			x := z.ByRank(rand.IntN(size))
			writeScored(c, x.Member(), x.Score(), withscores)
		}
		return
	}
	if l >= int64(size) { // the whole set, highest first as Redis walks it
		scoredArray(c, size, withscores)
		for x := z.Last(); x != nil; x = x.Prev() {
			writeScored(c, x.Member(), x.Score(), withscores)
		}
		return
	}
	count := int(l)
	var ranks []int
	if count*3 > size {
		ranks = rand.Perm(size)[:count]
	} else {
		seen := make(map[int]struct{}, count)
		for len(ranks) < count {
			r := rand.IntN(size)
			if _, dup := seen[r]; !dup {
				seen[r] = struct{}{}
				ranks = append(ranks, r)
			}
		}
	}
	scoredArray(c, count, withscores)
	for _, r := range ranks {
		x := z.ByRank(r)
		writeScored(c, x.Member(), x.Score(), withscores)
	}
}

// --- ZUNION, ZINTER, ZDIFF and their STORE forms, ZINTERCARD ---

type zsetOp uint8

const (
	opUnion zsetOp = iota
	opInter
	opDiff
)

type aggregate uint8

const (
	aggSum aggregate = iota
	aggMin
	aggMax
)

// zsrc is one input of a set operation: a sorted set, a plain set (every
// member scores 1, as in Redis) or nothing (a missing key).
type zsrc struct {
	z      *keyspace.Zset
	set    map[string]struct{}
	weight float64
}

func (s *zsrc) len() int {
	if s.z != nil {
		return s.z.Len()
	}
	return len(s.set)
}

func (s *zsrc) find(m string) (float64, bool) {
	if s.z != nil {
		return s.z.ScoreOf(m)
	}
	_, ok := s.set[m]
	return 1, ok
}

// each calls fn with every member and its (unweighted) score until fn
// returns false.
func (s *zsrc) each(fn func(m string, score float64) bool) {
	if s.z != nil {
		for x := s.z.Last(); x != nil; x = x.Prev() {
			if !fn(x.Member(), x.Score()) {
				return
			}
		}
		return
	}
	for m := range s.set {
		if !fn(m, 1) {
			return
		}
	}
}

func (a aggregate) apply(target *float64, v float64) {
	switch a {
	case aggSum:
		// inf + -inf is NaN: Redis makes it 0.
		if *target += v; math.IsNaN(*target) {
			*target = 0
		}
	case aggMin: // not min(): Go's orders -0 below 0, Redis keeps the first
		if v < *target {
			*target = v
		}
	case aggMax:
		if v > *target {
			*target = v
		}
	}
}

// weighted is weight × score, with NaN (0 × inf) as 0.
func weighted(w, s float64) float64 {
	if v := w * s; !math.IsNaN(v) {
		return v
	}
	return 0
}

type scored struct {
	m string
	s float64
}

func cmdZUnion(c *Ctx)      { zsetOperation(c, false, opUnion, false) }
func cmdZInter(c *Ctx)      { zsetOperation(c, false, opInter, false) }
func cmdZDiff(c *Ctx)       { zsetOperation(c, false, opDiff, false) }
func cmdZInterCard(c *Ctx)  { zsetOperation(c, false, opInter, true) }
func cmdZUnionStore(c *Ctx) { zsetOperation(c, true, opUnion, false) }
func cmdZInterStore(c *Ctx) { zsetOperation(c, true, opInter, false) }
func cmdZDiffStore(c *Ctx)  { zsetOperation(c, true, opDiff, false) }

// zsetOperation is Redis's zunionInterDiffGenericCommand. Scores are
// combined in the order Redis combines them (inputs sorted by size, each
// member's contributions in input order), so sums round the same way.
func zsetOperation(c *Ctx, store bool, op zsetOp, cardOnly bool) {
	at := 1
	if store {
		at = 2
	}
	setnum, ok := atoi(c.Args[at])
	if !ok {
		c.W.Error(errNotInt)
		return
	}
	if setnum < 1 {
		c.W.Error("ERR at least 1 input key is needed for '" + c.spec.Name + "' command")
		return
	}
	if setnum > int64(len(c.Args)-at-1) {
		c.W.Error(errSyntax)
		return
	}
	n := int(setnum)
	srcs := make([]zsrc, n)
	for i := range srcs {
		srcs[i].weight = 1
		e := c.read(c.Args[at+1+i])
		switch {
		case e == nil:
		case e.Kind() == keyspace.KindZset:
			srcs[i].z = e.Obj.Zset
		case e.Kind() == keyspace.KindSet:
			srcs[i].set = e.Obj.Set
		default:
			c.W.Error(errWrongType)
			return
		}
	}
	agg, withscores, limit := aggSum, false, int64(0)
	for j := at + 1 + n; j < len(c.Args); {
		a, remaining := c.Args[j], len(c.Args)-j
		switch {
		case op != opDiff && !cardOnly && remaining >= n+1 && optIs(a, "weights"):
			j++
			for i := range srcs {
				w, ok := parseScore(c.Args[j])
				if !ok {
					c.W.Error(errWeight)
					return
				}
				srcs[i].weight = w
				j++
			}
		case op != opDiff && !cardOnly && remaining >= 2 && optIs(a, "aggregate"):
			switch v := c.Args[j+1]; {
			case optIs(v, "sum"):
				agg = aggSum
			case optIs(v, "min"):
				agg = aggMin
			case optIs(v, "max"):
				agg = aggMax
			default:
				c.W.Error(errSyntax)
				return
			}
			j += 2
		case !store && !cardOnly && optIs(a, "withscores"):
			withscores = true
			j++
		case cardOnly && remaining >= 2 && optIs(a, "limit"):
			l, ok := atoi(c.Args[j+1])
			if !ok || l < 0 {
				c.W.Error(errLimitNeg)
				return
			}
			limit = l
			j += 2
		default:
			c.W.Error(errSyntax)
			return
		}
	}
	if op != opDiff {
		slices.SortStableFunc(srcs, func(a, b zsrc) int { return cmp.Compare(a.len(), b.len()) })
	}
	var out []scored
	card := int64(0)
	switch op {
	case opInter:
		if srcs[0].len() == 0 {
			break
		}
		srcs[0].each(func(m string, s float64) bool {
			score := weighted(srcs[0].weight, s)
			for j := 1; j < len(srcs); j++ {
				v, in := srcs[j].find(m)
				if !in {
					return true
				}
				// Unlike the first input's, Redis does not turn these
				// products' NaN into 0: SUM makes the total 0, MIN and MAX
				// keep what they had.
				agg.apply(&score, v*srcs[j].weight)
			}
			if cardOnly {
				card++
				return limit == 0 || card < limit
			}
			out = append(out, scored{m, score})
			return true
		})
	case opUnion:
		acc := map[string]int{} // member → index in out
		for i := range srcs {
			srcs[i].each(func(m string, s float64) bool {
				score := weighted(srcs[i].weight, s)
				if k, seen := acc[m]; seen {
					agg.apply(&out[k].s, score)
				} else {
					acc[m] = len(out)
					out = append(out, scored{m, score})
				}
				return true
			})
		}
	case opDiff:
		srcs[0].each(func(m string, s float64) bool {
			for j := 1; j < len(srcs); j++ {
				if _, in := srcs[j].find(m); in {
					return true
				}
			}
			out = append(out, scored{m, s})
			return true
		})
	}
	switch {
	case cardOnly:
		c.W.Int(card)
	case store:
		dst := c.Args[1]
		if len(out) == 0 {
			c.Tx.Delete(dst)
			c.W.Int(0)
			return
		}
		longest := 0
		for _, p := range out {
			longest = max(longest, len(p.m))
		}
		o := keyspace.NewZsetOf(len(out), longest)
		for _, p := range out {
			o.Zset.SetString(p.m, p.s)
		}
		c.Tx.SetObject(dst, o, c.defaultExpire())
		c.signal(dst)
		c.W.Int(int64(len(out)))
	default:
		slices.SortFunc(out, func(a, b scored) int {
			if c := cmp.Compare(a.s, b.s); c != 0 {
				return c
			}
			return cmp.Compare(a.m, b.m)
		})
		scoredArray(c, len(out), withscores)
		for _, p := range out {
			writeScored(c, p.m, p.s, withscores)
		}
	}
}

// --- ZSCAN ---

// parseCursor parses a SCAN cursor as Redis's parseScanCursorOrReply
// (strtoul): a C string, an optional sign ("-1" wraps around), digits, no
// leading space, no overflow.
func parseCursor(b []byte) (uint64, bool) {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	if len(b) == 0 {
		return 0, true
	}
	if isCSpace(b[0]) {
		return 0, false
	}
	i, neg := 0, false
	if b[0] == '+' || b[0] == '-' {
		i, neg = 1, b[0] == '-'
	}
	if i == len(b) {
		return 0, false
	}
	var v uint64
	for ; i < len(b); i++ {
		if !isDigit(b[i]) {
			return 0, false
		}
		d := uint64(b[i] - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	if neg {
		v = -v
	}
	return v, true
}

// scoreKey maps scores to cursors in the same order (and -0 to 0's); no
// score maps to 0, the cursor that starts and ends a scan.
func scoreKey(f float64) uint64 {
	if f == 0 {
		f = 0
	}
	b := math.Float64bits(f)
	if b>>63 == 1 {
		return ^b
	}
	return b | 1<<63
}

// scanFrom is the first node of a ZSCAN continuing at cursor.
func scanFrom(z *keyspace.Zset, cursor uint64) *keyspace.ZNode {
	switch {
	case cursor <= scoreKey(math.Inf(-1)):
		return z.First()
	case cursor > scoreKey(math.Inf(1)):
		return nil
	}
	b := ^cursor
	if cursor>>63 == 1 {
		b = cursor &^ (1 << 63)
	}
	return z.FirstInScore(&keyspace.ScoreRange{Min: math.Float64frombits(b), Max: math.Inf(1)})
}

// cmdZScan is ZSCAN. A set Redis would keep as a listpack comes whole in
// one reply with cursor 0, as from Redis. A larger one is walked in score
// order: the cursor encodes the score to continue at (scoreKey), and a
// reply never splits members of one score, so a member present for the
// whole scan is returned at least once unless its score changes meanwhile.
// COUNT is a hint: a run of equal scores comes whole.
func cmdZScan(c *Ctx) {
	cursor, ok := parseCursor(c.Args[2])
	if !ok {
		c.W.Error(errInvalidCur)
		return
	}
	_, z, ok := zsetAt(c, c.Args[1], true)
	if !ok {
		return
	}
	if z == nil {
		c.W.Array(2)
		c.W.BulkString("0")
		c.W.Array(0)
		return
	}
	count := int64(10)
	var match []byte
	for i := 3; i < len(c.Args); i += 2 {
		a, left := c.Args[i], len(c.Args)-i
		switch {
		case optIs(a, "count") && left >= 2:
			n, ok := atoi(c.Args[i+1])
			if !ok {
				c.W.Error(errNotInt)
				return
			}
			if n < 1 {
				c.W.Error(errSyntax)
				return
			}
			count = n
		case optIs(a, "match") && left >= 2:
			match = c.Args[i+1]
			if len(match) == 1 && match[0] == '*' {
				match = nil
			}
		default:
			c.W.Error(errSyntax)
			return
		}
	}
	small := z.Encoding() == "listpack"
	var x *keyspace.ZNode
	if small {
		x = z.First()
	} else {
		x = scanFrom(z, cursor)
	}
	var out []*keyspace.ZNode
	taken := int64(0)
	for ; x != nil; x = x.Next() {
		if !small && taken >= count && x.Score() != x.Prev().Score() {
			break
		}
		taken++
		if match == nil || globMatch(match, []byte(x.Member())) {
			out = append(out, x)
		}
	}
	next := uint64(0)
	if x != nil {
		next = scoreKey(x.Score())
	}
	c.W.Array(2)
	var num [20]byte
	c.W.Bulk(strconv.AppendUint(num[:0], next, 10))
	c.W.Array(2 * len(out))
	var buf [32]byte
	for _, x := range out {
		c.W.BulkString(x.Member())
		c.W.Bulk(scanScore(buf[:0], x.Score(), small))
	}
}

// scanScore formats a score as ZSCAN shows it: a listpack holds an
// integral score within ±2^62 as an integer, anything else as "%.17g".
func scanScore(dst []byte, f float64, small bool) []byte {
	if small && f >= -(1<<62) && f <= 1<<62 && f == math.Trunc(f) {
		return strconv.AppendInt(dst, int64(f), 10)
	}
	return resp.AppendDouble(dst, f)
}
