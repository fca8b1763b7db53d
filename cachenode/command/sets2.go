package command

import (
	"sort"
	"strconv"

	"github.com/portico-io/portico/cachenode/keyspace"
)

// Set commands that store or count (SMOVE, S*STORE, SINTERCARD) and the
// SSCAN/HSCAN cursors.

func init() {
	reg("smove", 4, wdf, 1, 2, 1, "set", "1.0.0", ksRWDelete, "Moves a member from one set to another.", cmdSMove)
	reg("sinterstore", -3, wd, 1, -1, 1, "set", "1.0.0", ksOW, "Stores the intersect of multiple sets in a key.", cmdSInterStore)
	reg("sunionstore", -3, wd, 1, -1, 1, "set", "1.0.0", ksOW, "Stores the union of multiple sets in a key.", cmdSUnionStore)
	reg("sdiffstore", -3, wd, 1, -1, 1, "set", "1.0.0", ksOW, "Stores the difference of multiple sets in a key.", cmdSDiffStore)
	regKeys("sintercard", -3, flagReadonly|flagMovableKeys, "set", "7.0.0", ksRO, "Returns the number of members of the intersect of multiple sets.", cmdSInterCard, keysAfterNumkeys(1))
	reg("sscan", -3, flagReadonly, 1, 1, 1, "set", "2.8.0", ksRO, "Iterates over members of a set.", cmdSScan)
	reg("hscan", -3, flagReadonly, 1, 1, 1, "hash", "2.8.0", ksRO, "Iterates over fields and values of a hash.", cmdHScan)
}

func cmdSMove(c *Ctx) {
	src, dst, m := c.Args[1], c.Args[2], c.Args[3]
	se := c.Tx.Get(src)
	de := c.Tx.Get(dst)
	if se == nil {
		c.W.Int(0)
		return
	}
	if se.Kind() != keyspace.KindSet || (de != nil && de.Kind() != keyspace.KindSet) {
		c.W.Error(errWrongType)
		return
	}
	if string(src) == string(dst) {
		if _, in := se.Obj.Set[string(m)]; in {
			c.W.Int(1)
		} else {
			c.W.Int(0)
		}
		return
	}
	if !se.Obj.SetRemove(string(m)) {
		c.W.Int(0)
		return
	}
	c.Tx.Update(src, se)
	if de == nil {
		de = c.Tx.SetObject(dst, keyspace.NewSet(), c.defaultExpire())
	}
	de.Obj.SetAdd(m)
	c.Tx.Update(dst, de)
	c.W.Int(1)
}

// interSets is the intersection of sets (nil entries are empty sets).
func interSets(sets []map[string]struct{}, limit int) []string {
	var out []string
	for _, s := range sets {
		if s == nil {
			return nil
		}
	}
	// Walk the smallest, as Redis does.
	small := 0
	for i, s := range sets {
		if len(s) < len(sets[small]) {
			small = i
		}
	}
next:
	for m := range sets[small] {
		for i, s := range sets {
			if i == small {
				continue
			}
			if _, in := s[m]; !in {
				continue next
			}
		}
		out = append(out, m)
		if limit > 0 && len(out) == limit {
			break
		}
	}
	return out
}

func unionSets(sets []map[string]struct{}) []string {
	u := map[string]struct{}{}
	for _, s := range sets {
		for m := range s {
			u[m] = struct{}{}
		}
	}
	out := make([]string, 0, len(u))
	for m := range u {
		out = append(out, m)
	}
	return out
}

func diffSets(sets []map[string]struct{}) []string {
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
	return out
}

// storeSet makes members the set at dst (deleting dst when empty) and
// replies with their number.
func storeSet(c *Ctx, dst []byte, members []string) {
	if len(members) == 0 {
		c.Tx.Delete(dst)
		c.W.Int(0)
		return
	}
	o := keyspace.NewSet()
	for _, m := range members {
		o.SetAdd([]byte(m))
	}
	c.Tx.SetObject(dst, o, c.defaultExpire())
	c.W.Int(int64(len(members)))
}

func setStore(c *Ctx, op func([]map[string]struct{}) []string) {
	sets, ok := setsOf(c, c.Args[2:])
	if !ok {
		return
	}
	storeSet(c, c.Args[1], op(sets))
}

func cmdSInterStore(c *Ctx) {
	setStore(c, func(s []map[string]struct{}) []string { return interSets(s, 0) })
}
func cmdSUnionStore(c *Ctx) { setStore(c, unionSets) }
func cmdSDiffStore(c *Ctx)  { setStore(c, diffSets) }

func cmdSInterCard(c *Ctx) {
	n, ok := atoi(c.Args[1])
	if !ok || n < 1 {
		c.W.Error(errNumkeys)
		return
	}
	if n > int64(len(c.Args)-2) {
		c.W.Error(errNumkeysRange)
		return
	}
	limit := int64(0)
	for j := 2 + int(n); j < len(c.Args); j++ {
		if eqFold(c.Args[j], "limit") && j+1 < len(c.Args) {
			j++
			v, ok := atoi(c.Args[j])
			if !ok || v < 0 {
				c.W.Error("ERR LIMIT can't be negative")
				return
			}
			limit = v
			continue
		}
		c.W.Error(errSyntax)
		return
	}
	sets, ok := setsOf(c, c.Args[2:2+n])
	if !ok {
		return
	}
	c.W.Int(int64(len(interSets(sets, int(min(limit, 1<<62))))))
}

// smallScan: a set or hash up to this size is returned by one SSCAN/HSCAN
// call with cursor 0, as Redis does for its compact encodings (128 hash
// fields; COUNT is only a hint).
const smallScan = 128

// scanHash is the hash a cursor orders members by (FNV-1a), so a cursor
// survives changes: every member present for the whole scan is returned,
// whatever was added or removed meanwhile.
func scanHash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// scanPage picks the members of a container to return from cursor: all of
// a small one (in sortFn's order); else the count members of smallest
// scanHash at or after cursor, with the next cursor (0 = done).
func scanPage(names []string, cursor uint64, count int, sortFn func([]string)) ([]string, uint64) {
	if len(names) <= smallScan {
		sortFn(names)
		return names, 0
	}
	type hm struct {
		h uint64
		m string
	}
	cand := make([]hm, 0, len(names))
	for _, m := range names {
		if h := scanHash(m); h >= cursor {
			cand = append(cand, hm{h, m})
		}
	}
	sort.Slice(cand, func(i, j int) bool { return cand[i].h < cand[j].h || cand[i].h == cand[j].h && cand[i].m < cand[j].m })
	n := min(count, len(cand))
	for n < len(cand) && n > 0 && cand[n].h == cand[n-1].h {
		n++ // never split members of one hash across calls
	}
	out := make([]string, n)
	for i := range out {
		out[i] = cand[i].m
	}
	if n == len(cand) || cand[n-1].h == ^uint64(0) {
		return out, 0
	}
	return out, cand[n-1].h + 1
}

// scanOpts parses a SSCAN/HSCAN's MATCH and COUNT.
func scanOpts(c *Ctx, from int) (match []byte, count int, ok bool) {
	count = 10
	for i := from; i < len(c.Args); i += 2 {
		if i+1 >= len(c.Args) {
			c.W.Error(errSyntax)
			return nil, 0, false
		}
		switch {
		case eqFold(c.Args[i], "count"):
			n, ok := atoi(c.Args[i+1])
			if !ok {
				c.W.Error(errNotInt)
				return nil, 0, false
			}
			if n < 1 {
				c.W.Error(errSyntax)
				return nil, 0, false
			}
			count = int(min(n, 1<<30))
		case eqFold(c.Args[i], "match"):
			match = c.Args[i+1]
			if len(match) == 1 && match[0] == '*' {
				match = nil
			}
		default:
			c.W.Error(errSyntax)
			return nil, 0, false
		}
	}
	return match, count, true
}

// scanCursor parses a cursor as Redis's strtoul does (digits; a leading
// '-' wraps around).
func scanCursor(c *Ctx, b []byte) (uint64, bool) {
	s := string(b)
	neg := len(s) > 0 && s[0] == '-'
	if neg || (len(s) > 0 && s[0] == '+') {
		s = s[1:]
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || len(s) == 0 || s[0] < '0' || s[0] > '9' {
		c.W.Error(errInvalidCur)
		return 0, false
	}
	if neg {
		v = -v
	}
	return v, true
}

func emptyScan(c *Ctx) {
	c.W.Array(2)
	c.W.BulkString("0")
	c.W.Array(0)
}

func scanReplyHeader(c *Ctx, next uint64, n int) {
	c.W.Array(2)
	c.W.BulkString(strconv.FormatUint(next, 10))
	c.W.Array(n)
}

// sortSetMembers orders members as Redis's compact set does: numerically
// when every member is an integer (an intset), else by bytes.
func sortSetMembers(ms []string) {
	nums := make([]int64, len(ms))
	for i, m := range ms {
		n, ok := atoi([]byte(m))
		if !ok {
			sort.Strings(ms)
			return
		}
		nums[i] = n
	}
	sort.Sort(byNum{ms, nums})
}

type byNum struct {
	s []string
	n []int64
}

func (b byNum) Len() int           { return len(b.s) }
func (b byNum) Less(i, j int) bool { return b.n[i] < b.n[j] }
func (b byNum) Swap(i, j int) {
	b.s[i], b.s[j] = b.s[j], b.s[i]
	b.n[i], b.n[j] = b.n[j], b.n[i]
}

func cmdSScan(c *Ctx) {
	cur, ok := scanCursor(c, c.Args[2])
	if !ok {
		return
	}
	e, ok := c.objectAt(c.Args[1], keyspace.KindSet, true)
	if !ok {
		return
	}
	if e == nil {
		emptyScan(c)
		return
	}
	match, count, ok := scanOpts(c, 3)
	if !ok {
		return
	}
	names := make([]string, 0, len(e.Obj.Set))
	for m := range e.Obj.Set {
		names = append(names, m)
	}
	page, next := scanPage(names, cur, count, sortSetMembers)
	out := page[:0]
	for _, m := range page {
		if match == nil || globMatch(match, []byte(m)) {
			out = append(out, m)
		}
	}
	scanReplyHeader(c, next, len(out))
	for _, m := range out {
		c.W.BulkString(m)
	}
}

func cmdHScan(c *Ctx) {
	cur, ok := scanCursor(c, c.Args[2])
	if !ok {
		return
	}
	e, ok := c.objectAt(c.Args[1], keyspace.KindHash, true)
	if !ok {
		return
	}
	if e == nil {
		emptyScan(c)
		return
	}
	match, count, ok := scanOpts(c, 3)
	if !ok {
		return
	}
	// A hash Redis holds as a listpack (up to 512 fields) comes whole,
	// whatever the cursor and COUNT, in its reply order, as Redis's does;
	// a larger one is paged (scanPage orders it).
	whole := e.Obj.HashListpack()
	fields := e.Obj.HashAll()
	if whole {
		fields = e.Obj.HashInOrder()
	}
	names := make([]string, 0, e.Obj.Len())
	for f := range fields {
		names = append(names, f)
	}
	page, next := names, uint64(0)
	if !whole {
		page, next = scanPage(names, cur, count, sort.Strings)
	}
	out := page[:0]
	for _, f := range page {
		if match == nil || globMatch(match, []byte(f)) {
			out = append(out, f)
		}
	}
	scanReplyHeader(c, next, 2*len(out))
	for _, f := range out {
		v, _ := e.Obj.HashGet([]byte(f))
		c.W.BulkString(f)
		c.W.Bulk(v)
	}
}
