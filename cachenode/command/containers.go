package command

import (
	"math/rand/v2"
	"sort"

	"github.com/portico-io/portico/cachenode/keyspace"
)

// objectAt returns the container at key, replying WRONGTYPE (ok=false) when
// key holds another type. read counts a hit or miss.
func (c *Ctx) objectAt(key []byte, kind keyspace.Kind, read bool) (*keyspace.Entry, bool) {
	var e *keyspace.Entry
	if read {
		e = c.read(key)
	} else {
		e = c.Tx.Get(key)
	}
	if e != nil && e.Kind() != kind {
		c.W.Error(errWrongType)
		return nil, false
	}
	return e, true
}

// create returns the container at key, creating an empty one when missing.
func (c *Ctx) create(key []byte, kind keyspace.Kind) (*keyspace.Entry, bool) {
	e, ok := c.objectAt(key, kind, false)
	if !ok || e != nil {
		return e, ok
	}
	var o *keyspace.Object
	switch kind {
	case keyspace.KindList:
		o = keyspace.NewList()
	case keyspace.KindSet:
		o = keyspace.NewSet()
	default:
		o = keyspace.NewHash()
	}
	e = c.Tx.SetObject(key, o, c.defaultExpire())
	c.signal(key) // clients blocked on it (BLPOP) wake once the command, or EXEC, is done
	return e, true
}

// --- lists ---

func push(c *Ctx, front bool) {
	for _, v := range c.Args[2:] {
		if !c.valueOK(len(v)) {
			return
		}
	}
	key := c.Args[1]
	e, ok := c.create(key, keyspace.KindList)
	if !ok {
		return
	}
	for _, v := range c.Args[2:] {
		if front {
			e.Obj.PushFront(v)
		} else {
			e.Obj.PushBack(v)
		}
	}
	n := e.Obj.Len()
	c.Tx.Update(key, e)
	c.W.Int(int64(n))
}

func cmdLPush(c *Ctx) { push(c, true) }
func cmdRPush(c *Ctx) { push(c, false) }

func pop(c *Ctx, front bool) {
	key := c.Args[1]
	count, withCount := int64(1), len(c.Args) == 3
	if len(c.Args) > 3 {
		c.W.Error("ERR wrong number of arguments for '" + c.spec.Name + "' command")
		return
	}
	if withCount {
		n, ok := atoi(c.Args[2])
		if !ok || n < 0 {
			c.W.Error(errPositive)
			return
		}
		count = n
	}
	e, ok := c.objectAt(key, keyspace.KindList, true)
	if !ok {
		return
	}
	if e == nil {
		if withCount {
			c.W.NullArray()
		} else {
			c.W.Null()
		}
		return
	}
	n := int(min(count, int64(e.Obj.Len())))
	if withCount {
		c.W.Array(n)
	}
	for range n {
		if front {
			c.W.Bulk(e.Obj.PopFront())
		} else {
			c.W.Bulk(e.Obj.PopBack())
		}
	}
	c.Tx.Update(key, e)
}

func cmdLPop(c *Ctx) { pop(c, true) }
func cmdRPop(c *Ctx) { pop(c, false) }

func cmdLLen(c *Ctx) {
	e, ok := c.objectAt(c.Args[1], keyspace.KindList, true)
	if !ok {
		return
	}
	if e == nil {
		c.W.Int(0)
		return
	}
	c.W.Int(int64(e.Obj.Len()))
}

// span converts Redis start/stop (negative from the end) into a half-open
// range of [0,n).
func span(start, stop int64, n int) (int, int) {
	if start < 0 {
		start += int64(n)
	}
	if stop < 0 {
		stop += int64(n)
	}
	start = max(start, 0)
	if stop >= int64(n) {
		stop = int64(n) - 1
	}
	if start > stop || start >= int64(n) {
		return 0, 0
	}
	return int(start), int(stop) + 1
}

func rangeArgs(c *Ctx) (int64, int64, bool) {
	a, ok1 := atoi(c.Args[2])
	b, ok2 := atoi(c.Args[3])
	if !ok1 || !ok2 {
		c.W.Error(errNotInt)
		return 0, 0, false
	}
	return a, b, true
}

func cmdLRange(c *Ctx) {
	start, stop, ok := rangeArgs(c)
	if !ok {
		return
	}
	e, ok := c.objectAt(c.Args[1], keyspace.KindList, true)
	if !ok {
		return
	}
	if e == nil {
		c.W.Array(0)
		return
	}
	from, to := span(start, stop, e.Obj.Len())
	c.W.Array(to - from)
	for i := from; i < to; i++ {
		c.W.Bulk(e.Obj.List.At(i))
	}
}

func cmdLIndex(c *Ctx) {
	idx, ok := atoi(c.Args[2])
	if !ok {
		c.W.Error(errNotInt)
		return
	}
	e, ok := c.objectAt(c.Args[1], keyspace.KindList, true)
	if !ok {
		return
	}
	if e == nil {
		c.W.Null()
		return
	}
	n := int64(e.Obj.Len())
	if idx < 0 {
		idx += n
	}
	if idx < 0 || idx >= n {
		c.W.Null()
		return
	}
	c.W.Bulk(e.Obj.List.At(int(idx)))
}

func listItems(o *keyspace.Object) [][]byte {
	items := make([][]byte, o.Len())
	for i := range items {
		items[i] = o.List.At(i)
	}
	return items
}

func cmdLRem(c *Ctx) {
	count, ok := atoi(c.Args[2])
	if !ok {
		c.W.Error(errNotInt)
		return
	}
	key, elem := c.Args[1], c.Args[3]
	e, ok := c.objectAt(key, keyspace.KindList, false)
	if !ok {
		return
	}
	if e == nil {
		c.W.Int(0)
		return
	}
	items := listItems(e.Obj)
	removed := int64(0)
	limit := count
	if limit < 0 {
		limit = -limit
	}
	keep := make([]bool, len(items))
	for i := range keep {
		keep[i] = true
	}
	visit := func(i int) {
		if (limit == 0 || removed < limit) && string(items[i]) == string(elem) {
			keep[i] = false
			removed++
		}
	}
	if count < 0 {
		for i := len(items) - 1; i >= 0; i-- {
			visit(i)
		}
	} else {
		for i := range items {
			visit(i)
		}
	}
	if removed > 0 {
		out := items[:0]
		for i, it := range items {
			if keep[i] {
				out = append(out, it)
			}
		}
		e.Obj.ListReplace(out)
		c.Tx.Update(key, e)
	}
	c.W.Int(removed)
}

func cmdLTrim(c *Ctx) {
	start, stop, ok := rangeArgs(c)
	if !ok {
		return
	}
	key := c.Args[1]
	e, ok := c.objectAt(key, keyspace.KindList, false)
	if !ok {
		return
	}
	if e != nil {
		items := listItems(e.Obj)
		from, to := span(start, stop, len(items))
		e.Obj.ListReplace(items[from:to])
		c.Tx.Update(key, e)
	}
	c.W.OK()
}

// --- sets ---

func cmdSAdd(c *Ctx) {
	for _, v := range c.Args[2:] {
		if !c.valueOK(len(v)) {
			return
		}
	}
	key := c.Args[1]
	e, ok := c.create(key, keyspace.KindSet)
	if !ok {
		return
	}
	var n int64
	for _, m := range c.Args[2:] {
		if e.Obj.SetAdd(m) {
			n++
		}
	}
	c.Tx.Update(key, e)
	c.W.Int(n)
}

func cmdSRem(c *Ctx) {
	key := c.Args[1]
	e, ok := c.objectAt(key, keyspace.KindSet, false)
	if !ok {
		return
	}
	var n int64
	if e != nil {
		for _, m := range c.Args[2:] {
			if e.Obj.SetRemove(string(m)) {
				n++
			}
		}
		c.Tx.Update(key, e)
	}
	c.W.Int(n)
}

func sortedMembers(set map[string]struct{}) []string {
	out := make([]string, 0, len(set))
	for m := range set {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

func writeSet(c *Ctx, members []string) {
	c.W.Set(len(members))
	for _, m := range members {
		c.W.BulkString(m)
	}
}

func cmdSMembers(c *Ctx) {
	e, ok := c.objectAt(c.Args[1], keyspace.KindSet, true)
	if !ok {
		return
	}
	if e == nil {
		c.W.Set(0)
		return
	}
	writeSet(c, sortedMembers(e.Obj.Set))
}

func cmdSIsMember(c *Ctx) {
	e, ok := c.objectAt(c.Args[1], keyspace.KindSet, true)
	if !ok {
		return
	}
	if e == nil {
		c.W.Int(0)
		return
	}
	if _, in := e.Obj.Set[string(c.Args[2])]; in {
		c.W.Int(1)
	} else {
		c.W.Int(0)
	}
}

func cmdSMIsMember(c *Ctx) {
	e, ok := c.objectAt(c.Args[1], keyspace.KindSet, true)
	if !ok {
		return
	}
	c.W.Array(len(c.Args) - 2)
	for _, m := range c.Args[2:] {
		in := false
		if e != nil {
			_, in = e.Obj.Set[string(m)]
		}
		if in {
			c.W.Int(1)
		} else {
			c.W.Int(0)
		}
	}
}

func cmdSCard(c *Ctx) {
	e, ok := c.objectAt(c.Args[1], keyspace.KindSet, true)
	if !ok {
		return
	}
	if e == nil {
		c.W.Int(0)
		return
	}
	c.W.Int(int64(e.Obj.Len()))
}

func countArg(c *Ctx) (int64, bool, bool) {
	if len(c.Args) > 3 {
		c.W.Error(errSyntax)
		return 0, false, false
	}
	if len(c.Args) < 3 {
		return 1, false, true
	}
	n, ok := atoi(c.Args[2])
	if !ok {
		c.W.Error(errNotInt)
		return 0, false, false
	}
	return n, true, true
}

func cmdSPop(c *Ctx) {
	count, withCount, ok := countArg(c)
	if !ok {
		return
	}
	if count < 0 {
		c.W.Error(errPositive)
		return
	}
	key := c.Args[1]
	e, ok := c.objectAt(key, keyspace.KindSet, true)
	if !ok {
		return
	}
	if e == nil {
		if withCount {
			c.W.Set(0)
		} else {
			c.W.Null()
		}
		return
	}
	var out []string
	for m := range e.Obj.Set { // map order is random
		if int64(len(out)) == count {
			break
		}
		out = append(out, m)
	}
	for _, m := range out {
		e.Obj.SetRemove(m)
	}
	c.Tx.Update(key, e)
	if withCount {
		writeSet(c, out)
	} else {
		c.W.BulkString(out[0])
	}
}

func cmdSRandMember(c *Ctx) {
	count, withCount, ok := countArg(c)
	if !ok {
		return
	}
	e, ok := c.objectAt(c.Args[1], keyspace.KindSet, true)
	if !ok {
		return
	}
	if e == nil {
		if withCount {
			c.W.Array(0)
		} else {
			c.W.Null()
		}
		return
	}
	if !withCount {
		for m := range e.Obj.Set {
			c.W.BulkString(m)
			return
		}
	}
	if count >= 0 {
		var out []string
		for m := range e.Obj.Set {
			if int64(len(out)) == count {
				break
			}
			out = append(out, m)
		}
		c.W.BulkStrings(out)
		return
	}
	// Negative count: -count picks, repeats allowed.
	n := -count
	if n > 1<<20 {
		c.W.Error(errPositive)
		return
	}
	members := sortedMembers(e.Obj.Set)
	c.W.Array(int(n))
	for range n {
		c.W.BulkString(members[rand.IntN(len(members))])
	}
}

// setsOf returns the sets at keys (nil for missing keys), or ok=false after
// replying WRONGTYPE.
func setsOf(c *Ctx, keys [][]byte) ([]map[string]struct{}, bool) {
	out := make([]map[string]struct{}, len(keys))
	for i, k := range keys {
		e, ok := c.objectAt(k, keyspace.KindSet, true)
		if !ok {
			return nil, false
		}
		if e != nil {
			out[i] = e.Obj.Set
		}
	}
	return out, true
}

func cmdSInter(c *Ctx) {
	sets, ok := setsOf(c, c.Args[1:])
	if !ok {
		return
	}
	var out []string
	if sets[0] != nil {
	next:
		for m := range sets[0] {
			for _, s := range sets[1:] {
				if _, in := s[m]; !in {
					continue next
				}
			}
			out = append(out, m)
		}
	}
	sort.Strings(out)
	writeSet(c, out)
}

func cmdSUnion(c *Ctx) {
	sets, ok := setsOf(c, c.Args[1:])
	if !ok {
		return
	}
	u := map[string]struct{}{}
	for _, s := range sets {
		for m := range s {
			u[m] = struct{}{}
		}
	}
	writeSet(c, sortedMembers(u))
}

func cmdSDiff(c *Ctx) {
	sets, ok := setsOf(c, c.Args[1:])
	if !ok {
		return
	}
	var out []string
next:
	for m := range sets[0] {
		for _, s := range sets[1:] {
			if _, in := s[m]; in {
				continue next
			}
		}
		out = append(out, m)
	}
	sort.Strings(out)
	writeSet(c, out)
}

// --- hashes ---

func cmdHSet(c *Ctx) {
	if len(c.Args)%2 != 0 {
		c.W.Error("ERR wrong number of arguments for '" + c.spec.Name + "' command")
		return
	}
	for i := 3; i < len(c.Args); i += 2 {
		if !c.valueOK(len(c.Args[i])) {
			return
		}
	}
	key := c.Args[1]
	e, ok := c.create(key, keyspace.KindHash)
	if !ok {
		return
	}
	var n int64
	for i := 2; i < len(c.Args); i += 2 {
		if e.Obj.HashSet(c.Args[i], c.Args[i+1]) {
			n++
		}
	}
	c.Tx.Update(key, e)
	if c.spec.Name == "hmset" {
		c.W.OK()
		return
	}
	c.W.Int(n)
}

func cmdHMSet(c *Ctx) { cmdHSet(c) }

func cmdHGet(c *Ctx) {
	e, ok := c.objectAt(c.Args[1], keyspace.KindHash, true)
	if !ok {
		return
	}
	if e == nil {
		c.W.Null()
		return
	}
	v, in := e.Obj.HashGet(c.Args[2])
	if !in {
		c.W.Null()
		return
	}
	c.W.Bulk(v)
}

func cmdHMGet(c *Ctx) {
	e, ok := c.objectAt(c.Args[1], keyspace.KindHash, true)
	if !ok {
		return
	}
	c.W.Array(len(c.Args) - 2)
	for _, f := range c.Args[2:] {
		if e == nil {
			c.W.Null()
			continue
		}
		if v, in := e.Obj.HashGet(f); in {
			c.W.Bulk(v)
		} else {
			c.W.Null()
		}
	}
}

func cmdHDel(c *Ctx) {
	key := c.Args[1]
	e, ok := c.objectAt(key, keyspace.KindHash, false)
	if !ok {
		return
	}
	var n int64
	if e != nil {
		for _, f := range c.Args[2:] {
			if e.Obj.HashDel(f) {
				n++
			}
		}
		c.Tx.Update(key, e)
	}
	c.W.Int(n)
}

// hashField is a field of a hash and its value, as the hash holds them.
type hashField struct {
	f string
	v []byte
}

// hashFields returns o's fields and values in the order replies list
// them (keyspace.Object.HashInOrder); they are the hash's own and valid
// until it changes.
func hashFields(o *keyspace.Object) []hashField {
	out := make([]hashField, 0, o.Len())
	for f, v := range o.HashInOrder() {
		out = append(out, hashField{f, v})
	}
	return out
}

func cmdHGetAll(c *Ctx) {
	e, ok := c.objectAt(c.Args[1], keyspace.KindHash, true)
	if !ok {
		return
	}
	if e == nil {
		c.W.Map(0)
		return
	}
	fields := hashFields(e.Obj)
	c.W.Map(len(fields))
	for _, f := range fields {
		c.W.BulkString(f.f)
		c.W.Bulk(f.v)
	}
}

func cmdHLen(c *Ctx) {
	e, ok := c.objectAt(c.Args[1], keyspace.KindHash, true)
	if !ok {
		return
	}
	if e == nil {
		c.W.Int(0)
		return
	}
	c.W.Int(int64(e.Obj.Len()))
}

func cmdHExists(c *Ctx) {
	e, ok := c.objectAt(c.Args[1], keyspace.KindHash, true)
	if !ok {
		return
	}
	if e != nil {
		if _, in := e.Obj.HashGet(c.Args[2]); in {
			c.W.Int(1)
			return
		}
	}
	c.W.Int(0)
}

func cmdHIncrBy(c *Ctx) {
	key, field := c.Args[1], c.Args[2]
	d, ok := atoi(c.Args[3])
	if !ok {
		c.W.Error(errNotInt)
		return
	}
	e, ok := c.objectAt(key, keyspace.KindHash, false)
	if !ok {
		return
	}
	var cur int64
	if e != nil {
		if v, in := e.Obj.HashGet(field); in {
			if cur, ok = atoi(v); !ok {
				c.W.Error(errHashNotInt)
				return
			}
		}
	}
	if (d > 0 && cur > (1<<63-1)-d) || (d < 0 && cur < (-1<<63)-d) {
		c.W.Error(errOverflow)
		return
	}
	if e == nil {
		e, _ = c.create(key, keyspace.KindHash)
	}
	cur += d
	e.Obj.HashSet(field, []byte(itoa(cur)))
	c.Tx.Update(key, e)
	c.W.Int(cur)
}

func hashList(c *Ctx, values bool) {
	e, ok := c.objectAt(c.Args[1], keyspace.KindHash, true)
	if !ok {
		return
	}
	if e == nil {
		c.W.Array(0)
		return
	}
	fields := hashFields(e.Obj)
	c.W.Array(len(fields))
	for _, f := range fields {
		if values {
			c.W.Bulk(f.v)
		} else {
			c.W.BulkString(f.f)
		}
	}
}

func cmdHKeys(c *Ctx) { hashList(c, false) }
func cmdHVals(c *Ctx) { hashList(c, true) }
