package command

import (
	"time"

	"github.com/portico-io/portico/cachenode/keyspace"
)

// List commands beyond the basic pushes and pops: the blocking pops and
// moves (blocking.go has the machinery), LMOVE, LMPOP, LPOS, LINSERT,
// LSET, LPUSHX/RPUSHX, with Redis 7.0's argument order and errors.

const (
	errNumkeys      = "ERR numkeys should be greater than 0"
	errCountGT0     = "ERR count should be greater than 0"
	errIndexRange   = "ERR index out of range"
	errRankZero     = "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list"
	errCountNeg     = "ERR COUNT can't be negative"
	errMaxlenNeg    = "ERR MAXLEN can't be negative"
	errNumkeysRange = "ERR Number of keys can't be greater than number of args"
)

func init() {
	const blk = flagWrite | flagBlocking
	reg("blpop", -3, blk, 1, -2, 1, "list", "2.0.0", ksRWDelete, "Removes and returns the first element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.", cmdBLPop)
	reg("brpop", -3, blk, 1, -2, 1, "list", "2.0.0", ksRWDelete, "Removes and returns the last element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.", cmdBRPop)
	reg("brpoplpush", 4, blk|flagDenyOOM, 1, 2, 1, "list", "2.2.0", ksRWDelete, "Pops an element from a list, pushes it to another list and returns it. Block until an element is available otherwise.", cmdBRPopLPush)
	reg("blmove", 6, blk|flagDenyOOM, 1, 2, 1, "list", "6.2.0", ksRWDelete, "Pops an element from a list, pushes it to another list and returns it. Blocks until an element is available otherwise.", cmdBLMove)
	regKeys("blmpop", -5, blk|flagMovableKeys, "list", "7.0.0", ksRWDelete, "Pops the first element from one of multiple lists. Blocks until an element is available otherwise.", cmdBLMPop, keysAfterNumkeys(2))
	reg("lmove", 5, wd, 1, 2, 1, "list", "6.2.0", ksRWDelete, "Returns an element after popping it from one list and pushing it to another.", cmdLMove)
	reg("rpoplpush", 3, wd, 1, 2, 1, "list", "1.2.0", ksRWDelete, "Returns the last element of a list after removing and pushing it to another list.", cmdRPopLPush)
	regKeys("lmpop", -4, flagWrite|flagMovableKeys, "list", "7.0.0", ksRWDelete, "Returns multiple elements from a list after removing them.", cmdLMPop, keysAfterNumkeys(1))
	reg("lpos", -3, flagReadonly, 1, 1, 1, "list", "6.0.6", ksRO, "Returns the index of matching elements in a list.", cmdLPos)
	reg("linsert", 5, wd, 1, 1, 1, "list", "2.2.0", ksRWInsert, "Inserts an element before or after another element in a list.", cmdLInsert)
	reg("lset", 4, wd, 1, 1, 1, "list", "1.0.0", ksRWUpdate, "Sets the value of an element in a list by its index.", cmdLSet)
	reg("lpushx", -3, wdf, 1, 1, 1, "list", "2.2.0", ksRWInsert, "Prepends one or more elements to a list only when the list exists.", cmdLPushX)
	reg("rpushx", -3, wdf, 1, 1, 1, "list", "2.2.0", ksRWInsert, "Appends an element to a list only when the list exists.", cmdRPushX)
}

// regKeys registers a command whose keys getKeys finds (movable keys).
func regKeys(name string, arity int, flags flag, group, since string, ks []string, summary string, fn func(*Ctx), getKeys func(args, buf [][]byte) [][]byte) {
	reg(name, arity, flags, 0, 0, 0, group, since, ks, summary, fn)
	table[name].getKeys = getKeys
}

// keysAfterNumkeys finds the keys of a command with a numkeys argument at idx
// and the keys right after it (LMPOP, BLMPOP, SINTERCARD), as Redis's
// genericGetKeys: none when numkeys is not a count the arguments hold.
func keysAfterNumkeys(idx int) func(args, buf [][]byte) [][]byte {
	return func(args, buf [][]byte) [][]byte {
		if idx >= len(args) {
			return buf
		}
		n, ok := atoi(args[idx])
		if !ok || n < 1 || n > int64(len(args)-idx-1) {
			return buf
		}
		return append(buf, args[idx+1:idx+1+int(n)]...)
	}
}

// listEnd parses LEFT/RIGHT (true = left, the head).
func listEnd(c *Ctx, b []byte) (bool, bool) {
	switch {
	case eqFold(b, "left"):
		return true, true
	case eqFold(b, "right"):
		return false, true
	}
	c.W.Error(errSyntax)
	return false, false
}

func popEnd(o *keyspace.Object, left bool) []byte {
	if left {
		return o.PopFront()
	}
	return o.PopBack()
}

func pushEnd(o *keyspace.Object, v []byte, left bool) {
	if left {
		o.PushFront(v)
	} else {
		o.PushBack(v)
	}
}

// lmove moves one element of src (srcEnt, a non-empty list) to dst and
// returns it; ok=false after replying WRONGTYPE when dst holds another
// type (nothing moves then).
func lmove(c *Ctx, src, dst []byte, srcEnt *keyspace.Entry, fromLeft, toLeft bool) ([]byte, bool) {
	if string(src) == string(dst) {
		v := popEnd(srcEnt.Obj, fromLeft)
		pushEnd(srcEnt.Obj, v, toLeft)
		c.Tx.Update(src, srcEnt)
		return v, true
	}
	dstEnt := c.Tx.Get(dst)
	if dstEnt != nil && dstEnt.Kind() != keyspace.KindList {
		c.W.Error(errWrongType)
		return nil, false
	}
	v := popEnd(srcEnt.Obj, fromLeft)
	c.Tx.Update(src, srcEnt)
	if dstEnt == nil {
		dstEnt = c.Tx.SetObject(dst, keyspace.NewList(), c.defaultExpire())
		c.signal(dst)
	}
	pushEnd(dstEnt.Obj, v, toLeft)
	c.Tx.Update(dst, dstEnt)
	return v, true
}

// nonEmptyList returns key's list when it holds elements (nil when
// missing), replying WRONGTYPE (ok=false) for another type.
func nonEmptyList(c *Ctx, key []byte) (*keyspace.Entry, bool) {
	e, ok := c.objectAt(key, keyspace.KindList, true)
	if !ok || e == nil || e.Obj.Len() == 0 {
		return nil, ok
	}
	return e, true
}

func moveGeneric(c *Ctx, fromLeft, toLeft bool, timeoutArg []byte) {
	var timeout time.Duration
	if timeoutArg != nil {
		var ok bool
		if timeout, ok = c.blockTimeout(timeoutArg); !ok {
			return
		}
	}
	src, dst := c.Args[1], c.Args[2]
	e, ok := nonEmptyList(c, src)
	if !ok {
		return
	}
	if e != nil {
		if v, ok := lmove(c, src, dst, e, fromLeft, toLeft); ok {
			c.W.Bulk(v)
		}
		return
	}
	if timeoutArg == nil || !c.canBlock() {
		c.W.Null()
		return
	}
	dst = append([]byte(nil), dst...) // the argument aliases the connection's buffer
	c.block([][]byte{src}, keyspace.KindList, timeout, [][]byte{dst}, func(c *Ctx, key []byte, e *keyspace.Entry) {
		if v, ok := lmove(c, key, dst, e, fromLeft, toLeft); ok {
			c.W.Bulk(v)
		}
	})
}

func cmdLMove(c *Ctx) {
	from, ok1 := listEnd(c, c.Args[3])
	if !ok1 {
		return
	}
	to, ok2 := listEnd(c, c.Args[4])
	if !ok2 {
		return
	}
	moveGeneric(c, from, to, nil)
}

func cmdRPopLPush(c *Ctx) { moveGeneric(c, false, true, nil) }

func cmdBLMove(c *Ctx) {
	from, ok1 := listEnd(c, c.Args[3])
	if !ok1 {
		return
	}
	to, ok2 := listEnd(c, c.Args[4])
	if !ok2 {
		return
	}
	moveGeneric(c, from, to, c.Args[5])
}

func cmdBRPopLPush(c *Ctx) { moveGeneric(c, false, true, c.Args[3]) }

// popReply pops up to count elements (count < 0: one, as BLPOP's
// [key, value]; else LMPOP's [key, [values...]]) and replies.
func popReply(c *Ctx, key []byte, e *keyspace.Entry, left bool, count int64) {
	c.W.Array(2)
	c.W.Bulk(key)
	if count < 0 {
		c.W.Bulk(popEnd(e.Obj, left))
	} else {
		n := int(min(count, int64(e.Obj.Len())))
		c.W.Array(n)
		for range n {
			c.W.Bulk(popEnd(e.Obj, left))
		}
	}
	c.Tx.Update(key, e)
}

// blockingPop is BLPOP, BRPOP and BLMPOP once their arguments parsed: the
// first key in order holding a non-empty list is popped, else the client
// blocks (a key of another type first is WRONGTYPE).
func blockingPop(c *Ctx, keys [][]byte, left bool, count int64, timeout time.Duration, block bool) {
	popFirstOrBlock(c, keys, keyspace.KindList, nonEmptyList, func(c *Ctx, key []byte, e *keyspace.Entry) {
		popReply(c, key, e, left, count)
	}, timeout, block)
}

// popFirstOrBlock is the blocking pops' common shape: reply from the first
// of keys that find returns an entry for (find has replied and returns
// false on an error, such as WRONGTYPE), else block on keys for an entry of
// kind (when block and the connection can wait), else reply a null array.
func popFirstOrBlock(c *Ctx, keys [][]byte, kind keyspace.Kind, find func(*Ctx, []byte) (*keyspace.Entry, bool),
	reply func(*Ctx, []byte, *keyspace.Entry), timeout time.Duration, block bool) {
	for _, k := range keys {
		e, ok := find(c, k)
		if !ok {
			return
		}
		if e != nil {
			reply(c, k, e)
			return
		}
	}
	if !block || !c.canBlock() {
		c.W.NullArray()
		return
	}
	c.block(keys, kind, timeout, nil, reply)
}

func bpop(c *Ctx, left bool) {
	timeout, ok := c.blockTimeout(c.Args[len(c.Args)-1])
	if !ok {
		return
	}
	blockingPop(c, c.Args[1:len(c.Args)-1], left, -1, timeout, true)
}

func cmdBLPop(c *Ctx) { bpop(c, true) }
func cmdBRPop(c *Ctx) { bpop(c, false) }

// mpopArgs parses "numkeys key... LEFT|RIGHT [COUNT n]" from args[idx].
func mpopArgs(c *Ctx, idx int) (keys [][]byte, left bool, count int64, ok bool) {
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
	if left, ok = listEnd(c, c.Args[where]); !ok {
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
	return c.Args[idx+1 : where], left, count, true
}

func cmdLMPop(c *Ctx) {
	keys, left, count, ok := mpopArgs(c, 1)
	if !ok {
		return
	}
	blockingPop(c, keys, left, count, 0, false)
}

func cmdBLMPop(c *Ctx) {
	timeout, ok := c.blockTimeout(c.Args[1])
	if !ok {
		return
	}
	keys, left, count, ok := mpopArgs(c, 2)
	if !ok {
		return
	}
	blockingPop(c, keys, left, count, timeout, true)
}

func cmdLPos(c *Ctx) {
	rank, count, maxlen := int64(1), int64(-1), int64(0)
	for j := 3; j < len(c.Args); j++ {
		more := j+1 < len(c.Args)
		switch {
		case eqFold(c.Args[j], "rank") && more:
			j++
			v, ok := atoi(c.Args[j])
			if !ok {
				c.W.Error(errNotInt)
				return
			}
			if v == 0 {
				c.W.Error(errRankZero)
				return
			}
			rank = v
		case eqFold(c.Args[j], "count") && more:
			j++
			v, ok := atoi(c.Args[j])
			if !ok || v < 0 {
				c.W.Error(errCountNeg)
				return
			}
			count = v
		case eqFold(c.Args[j], "maxlen") && more:
			j++
			v, ok := atoi(c.Args[j])
			if !ok || v < 0 {
				c.W.Error(errMaxlenNeg)
				return
			}
			maxlen = v
		default:
			c.W.Error(errSyntax)
			return
		}
	}
	fromTail := rank < 0
	if fromTail {
		if rank == -1<<63 {
			rank = 1<<63 - 1 // -rank overflows; no list is that long anyway
		} else {
			rank = -rank
		}
	}
	e, ok := c.objectAt(c.Args[1], keyspace.KindList, true)
	if !ok {
		return
	}
	if e == nil {
		if count != -1 {
			c.W.Array(0)
		} else {
			c.W.Null()
		}
		return
	}
	elem := string(c.Args[2])
	n := e.Obj.Len()
	var out []int64
	matches := int64(0)
	for i := 0; i < n && (maxlen == 0 || int64(i) < maxlen); i++ {
		pos := i
		if fromTail {
			pos = n - 1 - i
		}
		if string(e.Obj.List.At(pos)) != elem {
			continue
		}
		matches++
		if matches < rank {
			continue
		}
		out = append(out, int64(pos))
		if count == -1 || (count > 0 && int64(len(out)) >= count) {
			break
		}
	}
	if count != -1 {
		c.W.Array(len(out))
		for _, p := range out {
			c.W.Int(p)
		}
		return
	}
	if len(out) == 0 {
		c.W.Null()
		return
	}
	c.W.Int(out[0])
}

func cmdLInsert(c *Ctx) {
	var after bool
	switch {
	case eqFold(c.Args[2], "after"):
		after = true
	case eqFold(c.Args[2], "before"):
	default:
		c.W.Error(errSyntax)
		return
	}
	key := c.Args[1]
	e, ok := c.objectAt(key, keyspace.KindList, false)
	if !ok {
		return
	}
	if e == nil {
		c.W.Int(0)
		return
	}
	if !c.valueOK(len(c.Args[4])) {
		return
	}
	items := listItems(e.Obj)
	for i, it := range items {
		if string(it) != string(c.Args[3]) {
			continue
		}
		if after {
			i++
		}
		out := make([][]byte, 0, len(items)+1)
		out = append(append(append(out, items[:i]...), append([]byte(nil), c.Args[4]...)), items[i:]...)
		e.Obj.ListReplace(out)
		c.Tx.Update(key, e)
		c.W.Int(int64(len(out)))
		return
	}
	c.W.Int(-1)
}

func cmdLSet(c *Ctx) {
	key := c.Args[1]
	e, ok := c.objectAt(key, keyspace.KindList, false)
	if !ok {
		return
	}
	if e == nil {
		c.W.Error(errNoSuchKey)
		return
	}
	idx, ok := atoi(c.Args[2])
	if !ok {
		c.W.Error(errNotInt)
		return
	}
	n := int64(e.Obj.Len())
	if idx < 0 {
		idx += n
	}
	if idx < 0 || idx >= n {
		c.W.Error(errIndexRange)
		return
	}
	if !c.valueOK(len(c.Args[3])) {
		return
	}
	items := listItems(e.Obj)
	items[idx] = append([]byte(nil), c.Args[3]...)
	e.Obj.ListReplace(items)
	c.Tx.Update(key, e)
	c.W.OK()
}

func pushx(c *Ctx, front bool) {
	e, ok := c.objectAt(c.Args[1], keyspace.KindList, false)
	if !ok {
		return
	}
	if e == nil {
		c.W.Int(0)
		return
	}
	push(c, front)
}

func cmdLPushX(c *Ctx) { pushx(c, true) }
func cmdRPushX(c *Ctx) { pushx(c, false) }
