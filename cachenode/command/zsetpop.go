package command

import (
	"time"

	"github.com/portico-io/portico/cachenode/keyspace"
)

// The multi-key and blocking sorted-set pops, ZMPOP, BZMPOP, BZPOPMIN and
// BZPOPMAX, as Redis 7.0's t_zset.c runs them (genericZpopCommand,
// blockingGenericZpopCommand, zmpopGenericCommand): the first key in
// argument order that exists is popped (one of another type first is
// WRONGTYPE); otherwise the blocking forms wait on every key through the
// machinery of blocking.go and are served by the first write that leaves
// one of them holding a sorted set, in arrival order.

func init() {
	const g = "sorted-set"
	const blk = flagWrite | flagBlocking
	reg("bzpopmin", -3, blk|flagFast, 1, -2, 1, g, "5.0.0", ksRWDelete, "Removes and returns the member with the lowest score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped.", cmdBZPopMin)
	reg("bzpopmax", -3, blk|flagFast, 1, -2, 1, g, "5.0.0", ksRWDelete, "Removes and returns the member with the highest score from one or more sorted sets. Blocks until a member available otherwise.  Deletes the sorted set if the last element was popped.", cmdBZPopMax)
	regKeys("zmpop", -4, flagWrite|flagMovableKeys, g, "7.0.0", ksRWDelete, "Returns the highest- or lowest-scoring members from one or more sorted sets after removing them. Deletes the sorted set if the last member was popped.", cmdZMPop, keysAfterNumkeys(1))
	regKeys("bzmpop", -5, blk|flagMovableKeys, g, "7.0.0", ksRWDelete, "Removes and returns a member by score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped.", cmdBZMPop, keysAfterNumkeys(2))
}

// zpopReply pops up to count members of key's sorted set (e, not empty)
// from the low end (or the high end when highest) and replies: count < 0
// is BZPOPMIN's flat [key, member, score]; otherwise ZMPOP's
// [key, [[member, score], ...]].
func zpopReply(c *Ctx, key []byte, e *keyspace.Entry, highest bool, count int64) {
	z := e.Obj.Zset
	n := 1
	if count >= 0 {
		n = int(min(count, int64(z.Len())))
		c.W.Array(2)
		c.W.Bulk(key)
		c.W.Array(n)
	} else {
		c.W.Array(3)
		c.W.Bulk(key)
	}
	for range n {
		x := z.First()
		if highest {
			x = z.Last()
		}
		if count >= 0 {
			c.W.Array(2)
		}
		c.W.BulkString(x.Member())
		c.W.Double(x.Score())
		z.RemoveNode(x)
	}
	c.Tx.Update(key, e)
}

// zpopKeys pops from the first of keys holding a sorted set, or blocks
// (when block and the connection can wait) or replies a null array. The
// type is checked key by key up to the first that exists, as Redis does.
func zpopKeys(c *Ctx, keys [][]byte, highest bool, count int64, timeout time.Duration, block bool) {
	find := func(c *Ctx, k []byte) (*keyspace.Entry, bool) {
		e, _, ok := zsetAt(c, k, false)
		return e, ok
	}
	popFirstOrBlock(c, keys, keyspace.KindZset, find, func(c *Ctx, key []byte, e *keyspace.Entry) {
		zpopReply(c, key, e, highest, count)
	}, timeout, block)
}

func bzpop(c *Ctx, highest bool) {
	timeout, ok := c.blockTimeout(c.Args[len(c.Args)-1])
	if !ok {
		return
	}
	zpopKeys(c, c.Args[1:len(c.Args)-1], highest, -1, timeout, true)
}

func cmdBZPopMin(c *Ctx) { bzpop(c, false) }
func cmdBZPopMax(c *Ctx) { bzpop(c, true) }

// zmpopArgs parses "numkeys key... MIN|MAX [COUNT n]" from args[idx]
// (highest: MAX).
func zmpopArgs(c *Ctx, idx int) (keys [][]byte, highest bool, count int64, ok bool) {
	n, ok := atoi(c.Args[idx])
	if !ok || n < 1 {
		c.W.Error(errNumkeys)
		return nil, false, 0, false
	}
	where := int64(idx) + n + 1
	if n >= int64(len(c.Args)) || where >= int64(len(c.Args)) {
		c.W.Error(errSyntax)
		return nil, false, 0, false
	}
	switch {
	case eqFold(c.Args[where], "min"):
	case eqFold(c.Args[where], "max"):
		highest = true
	default:
		c.W.Error(errSyntax)
		return nil, false, 0, false
	}
	count = -1
	for j := int(where) + 1; j < len(c.Args); j++ {
		if count == -1 && eqFold(c.Args[j], "count") && j+1 < len(c.Args) {
			j++
			v, ok := atoi(c.Args[j])
			if !ok || v < 1 {
				c.W.Error(errCountGT0)
				return nil, false, 0, false
			}
			count = v
			continue
		}
		c.W.Error(errSyntax)
		return nil, false, 0, false
	}
	if count == -1 {
		count = 1
	}
	return c.Args[idx+1 : where], highest, count, true
}

func cmdZMPop(c *Ctx) {
	keys, highest, count, ok := zmpopArgs(c, 1)
	if !ok {
		return
	}
	zpopKeys(c, keys, highest, count, 0, false)
}

// cmdBZMPop parses the timeout after the other arguments, as Redis 7.0's
// BZMPOP does (BLMPOP parses it first).
func cmdBZMPop(c *Ctx) {
	keys, highest, count, ok := zmpopArgs(c, 2)
	if !ok {
		return
	}
	timeout, ok := c.blockTimeout(c.Args[1])
	if !ok {
		return
	}
	zpopKeys(c, keys, highest, count, timeout, true)
}
