package command

import (
	"bytes"
	"math"
	"sort"
	"strings"

	"github.com/portico-io/portico/cachenode/dump"
	"github.com/portico-io/portico/cachenode/keyspace"
)

// Generic key commands: COPY, RENAMENX, EXPIRETIME, PEXPIRETIME, SORT and
// SORT_RO, with Redis 7.0's errors.

func init() {
	reg("copy", -3, wd, 1, 2, 1, "generic", "6.2.0", ksOW, "Copies the value of a key to a new key.", cmdCopy)
	reg("renamenx", 3, wf, 1, 2, 1, "generic", "1.0.0", ksRWDelete, "Renames a key only when the target key name doesn't exist.", cmdRenameNX)
	reg("expiretime", 2, rf, 1, 1, 1, "generic", "7.0.0", []string{"RO", "ACCESS"}, "Returns the expiration time of a key as a Unix timestamp.", cmdExpireTime)
	reg("pexpiretime", 2, rf, 1, 1, 1, "generic", "7.0.0", []string{"RO", "ACCESS"}, "Returns the expiration time of a key as a Unix milliseconds timestamp.", cmdPExpireTime)
	regKeys("sort", -2, wd|flagMovableKeys, "generic", "1.0.0", ksRO, "Sorts the elements in a list, a set, or a sorted set, optionally storing the result.", cmdSort, sortKeys)
	table["sort"].First, table["sort"].Last, table["sort"].Step = 1, 1, 1 // as Redis reports it, STORE aside
	reg("sort_ro", -2, flagReadonly, 1, 1, 1, "generic", "7.0.0", ksRO, "Returns the sorted elements of a list, a set, or a sorted set.", cmdSortRO)
}

func cmdCopy(c *Ctx) {
	src, dst := c.Args[1], c.Args[2]
	replace := false
	for j := 3; j < len(c.Args); j++ {
		switch {
		case eqFold(c.Args[j], "replace"):
			replace = true
		case eqFold(c.Args[j], "db") && j+1 < len(c.Args):
			n, ok := atoi(c.Args[j+1])
			if !ok || n != int64(int32(n)) {
				c.W.Error(errNotInt)
				return
			}
			// One database: DB 0 is this one, any other does not exist
			// (in cluster mode Redis refuses it in so many words).
			if n != 0 {
				if c.e.cfg.Cluster != nil {
					c.W.Error("ERR Copying to another database is not allowed in cluster mode")
				} else {
					c.W.Error(errDBIndex)
				}
				return
			}
			j++
		default:
			c.W.Error(errSyntax)
			return
		}
	}
	if string(src) == string(dst) {
		c.W.Error("ERR source and destination objects are the same")
		return
	}
	e := c.read(src)
	if e == nil {
		c.W.Int(0)
		return
	}
	if c.Tx.Get(dst) != nil && !replace {
		c.W.Int(0)
		return
	}
	if e.Kind() == keyspace.KindString && !c.valueOK(len(e.Str)) {
		return
	}
	// The dump encoding is a deep copy of any type, the sorted sets' too.
	v, err := dump.DecodeValue(dump.AppendValue(nil, e))
	if err != nil {
		c.W.Error("ERR " + err.Error())
		return
	}
	v.ExpireAt = e.ExpireAt()
	v.Store(c.Tx, dst)
	c.signal(dst)
	c.W.Int(1)
}

func cmdRenameNX(c *Ctx) {
	src, dst := c.Args[1], c.Args[2]
	e := c.Tx.Get(src)
	if e == nil {
		c.W.Error(errNoSuchKey)
		return
	}
	if string(src) == string(dst) || c.Tx.Get(dst) != nil {
		c.W.Int(0)
		return
	}
	c.Tx.Rename(src, dst, e)
	c.signal(dst)
	c.W.Int(1)
}

// expireTime: -2 missing, -1 no TTL, else the deadline (seconds rounded
// as Redis's ttlGenericCommand does).
func expireTime(c *Ctx, ms bool) {
	e := c.Tx.Peek(c.Args[1])
	switch {
	case e == nil:
		c.W.Int(-2)
	case e.ExpireAt() == 0:
		c.W.Int(-1)
	case ms:
		c.W.Int(e.ExpireAt())
	default:
		c.W.Int((e.ExpireAt() + 500) / 1000)
	}
}

func cmdExpireTime(c *Ctx)  { expireTime(c, false) }
func cmdPExpireTime(c *Ctx) { expireTime(c, true) }

// sortKeys is Redis's sortGetKeys: the sorted key, and the last STORE's
// destination, skipping LIMIT's two and GET's and BY's one argument.
func sortKeys(args, buf [][]byte) [][]byte {
	if len(args) < 2 {
		return buf
	}
	buf = append(buf, args[1])
	var store []byte
	for i := 2; i < len(args); i++ {
		switch {
		case eqFold(args[i], "limit"):
			i += 2
		case eqFold(args[i], "get"), eqFold(args[i], "by"):
			i++
		case eqFold(args[i], "store") && i+1 < len(args):
			store = args[i+1]
		}
	}
	if store != nil {
		buf = append(buf, store)
	}
	return buf
}

type sortOpts struct {
	desc, alpha, dontSort bool
	start, count          int64 // count < 0: to the end
	store, by             []byte
	gets                  [][]byte
}

// parseSort is the option loop of Redis's sortCommandGeneric.
func parseSort(c *Ctx, readonly bool) (sortOpts, bool) {
	o := sortOpts{count: -1}
	cluster := c.e.cfg.Cluster != nil
	for j := 2; j < len(c.Args); j++ {
		left := len(c.Args) - j - 1
		a := c.Args[j]
		switch {
		case eqFold(a, "asc"):
			o.desc = false
		case eqFold(a, "desc"):
			o.desc = true
		case eqFold(a, "alpha"):
			o.alpha = true
		case eqFold(a, "limit") && left >= 2:
			s, ok1 := atoi(c.Args[j+1])
			n, ok2 := atoi(c.Args[j+2])
			if !ok1 || !ok2 {
				c.W.Error(errNotInt)
				return o, false
			}
			o.start, o.count = s, n
			j += 2
		case !readonly && eqFold(a, "store") && left >= 1:
			o.store = c.Args[j+1]
			j++
		case eqFold(a, "by") && left >= 1:
			o.by = c.Args[j+1]
			o.dontSort = bytes.IndexByte(o.by, '*') < 0
			if !o.dontSort && cluster {
				c.W.Error("ERR BY option of SORT denied in Cluster mode.")
				return o, false
			}
			j++
		case eqFold(a, "get") && left >= 1:
			if cluster {
				c.W.Error("ERR GET option of SORT denied in Cluster mode.")
				return o, false
			}
			o.gets = append(o.gets, c.Args[j+1])
			j++
		default:
			c.W.Error(errSyntax)
			return o, false
		}
	}
	return o, true
}

// lockAllForPatterns makes c.Tx hold every shard, so BY/GET patterns may
// read any key (standalone only: cluster mode refused them). Called
// before any key is read; false after replying when it cannot.
func lockAllForPatterns(c *Ctx) bool {
	if c.Tx.HoldsAll() {
		return true
	}
	if c.batch != nil && c.Tx == c.batch.tx {
		// The locks are a transaction's: they cannot be traded for all.
		c.W.Error("ERR SORT with BY or GET patterns inside MULTI needs every key locked (a keyless command such as KEYS in the transaction)")
		return false
	}
	all, ok := c.db().(interface{ BeginAll(*keyspace.Txn, int64) })
	if !ok {
		c.W.Error("ERR SORT with BY or GET patterns is not supported here")
		return false
	}
	now := c.Tx.Now()
	c.Tx.End()
	all.BeginAll(c.Tx, now)
	return true
}

// lookupPattern is Redis's lookupKeyByPattern: "#" is the element itself;
// otherwise the first '*' takes the element, and "->field" after it reads
// a hash field. A missing key, or one of the wrong type, is nil.
func lookupPattern(c *Ctx, pat, elem []byte) ([]byte, bool) {
	if len(pat) == 1 && pat[0] == '#' {
		return elem, true
	}
	if i := bytes.IndexByte(pat, 0); i >= 0 {
		pat = pat[:i] // a C string ends there
	}
	star := bytes.IndexByte(pat, '*')
	if star < 0 {
		return nil, false
	}
	var field []byte
	post := pat[star+1:]
	if f := bytes.Index(post, []byte("->")); f >= 0 && f+2 < len(post) {
		field, post = post[f+2:], post[:f]
	}
	key := make([]byte, 0, len(pat)+len(elem))
	key = append(append(append(key, pat[:star]...), elem...), post...)
	e := c.Tx.Get(key)
	if e == nil {
		return nil, false
	}
	if field != nil {
		if e.Kind() != keyspace.KindHash {
			return nil, false
		}
		return e.Obj.HashGet(field)
	}
	if e.Kind() != keyspace.KindString {
		return nil, false
	}
	return e.Str, true
}

// sortStrtod is C's strtod as SORT checks it: leading spaces skipped, the
// whole rest a number; an empty string is 0; NaN and overflow fail.
func sortStrtod(b []byte) (float64, bool) {
	if len(b) == 0 {
		return 0, true
	}
	s := strings.TrimLeft(string(b), " \t\n\v\f\r")
	if s == "" {
		return 0, false
	}
	f, ok := parseTimeoutFloat([]byte(s))
	if !ok || math.IsNaN(f) {
		return 0, false
	}
	if math.IsInf(f, 0) && !strings.Contains(strings.ToLower(s), "inf") {
		return 0, false // overflow (ERANGE)
	}
	return f, true
}

type sortItem struct {
	obj    []byte
	score  float64
	cmp    []byte
	hasCmp bool
}

func cmdSort(c *Ctx)   { sortGeneric(c, false) }
func cmdSortRO(c *Ctx) { sortGeneric(c, true) }

func sortGeneric(c *Ctx, readonly bool) {
	o, ok := parseSort(c, readonly)
	if !ok {
		return
	}
	patterns := o.by != nil && !o.dontSort
	for _, g := range o.gets {
		patterns = patterns || !(len(g) == 1 && g[0] == '#')
	}
	if patterns && !lockAllForPatterns(c) {
		return
	}
	e := c.read(c.Args[1])
	var elems [][]byte
	kind := keyspace.KindList
	if e != nil {
		kind = e.Kind()
		switch kind {
		case keyspace.KindList:
			elems = listItems(e.Obj)
		case keyspace.KindSet:
			for m := range e.Obj.Set {
				elems = append(elems, []byte(m))
			}
		case keyspace.KindZset: // in score order, what BY nosort keeps
			for n := e.Obj.Zset.First(); n != nil; n = n.Next() {
				elems = append(elems, []byte(n.Member()))
			}
		default:
			c.W.Error(errWrongType)
			return
		}
	}
	if o.dontSort && kind == keyspace.KindSet && o.store != nil {
		// A set has no order of its own: a stored result is sorted, so it
		// is the same on a replica.
		o.dontSort, o.alpha, o.by = false, true, nil
	}
	n := int64(len(elems))
	start := max(o.start, 0)
	end := n - 1
	if o.count >= 0 {
		end = start + o.count - 1
		if o.count > 0 && start > math.MaxInt64-o.count {
			end = math.MaxInt64
		}
	}
	if start >= n {
		start, end = n-1, n-2
	}
	end = min(end, n-1)

	items := make([]sortItem, len(elems))
	for i, el := range elems {
		items[i].obj = el
	}
	convErr := false
	if o.dontSort {
		if o.desc && kind != keyspace.KindSet {
			for i, j := 0, len(items)-1; i < j; i, j = i+1, j-1 {
				items[i], items[j] = items[j], items[i]
			}
		}
	} else {
		for i := range items {
			by := items[i].obj
			if o.by != nil {
				v, ok := lookupPattern(c, o.by, items[i].obj)
				if !ok {
					continue
				}
				by = v
			}
			if o.alpha {
				if o.by != nil {
					items[i].cmp, items[i].hasCmp = by, true
				}
				continue
			}
			f, ok := sortStrtod(by)
			if !ok {
				convErr = true
			}
			items[i].score = f
		}
		sort.SliceStable(items, func(i, j int) bool {
			r := sortCompare(&items[i], &items[j], o.alpha, o.by != nil)
			if o.desc {
				r = -r
			}
			return r < 0
		})
	}
	if convErr {
		c.W.Error("ERR One or more scores can't be converted into double")
		return
	}
	outLen := end - start + 1
	if outLen < 0 {
		outLen = 0
	}
	if len(o.gets) > 0 {
		outLen *= int64(len(o.gets))
	}
	if o.store == nil {
		c.W.Array(int(outLen))
		for j := start; j <= end; j++ {
			if len(o.gets) == 0 {
				c.W.Bulk(items[j].obj)
			}
			for _, g := range o.gets {
				if v, ok := lookupPattern(c, g, items[j].obj); ok {
					c.W.Bulk(v)
				} else {
					c.W.Null()
				}
			}
		}
		return
	}
	out := keyspace.NewList()
	for j := start; j <= end; j++ {
		if len(o.gets) == 0 {
			out.PushBack(items[j].obj)
		}
		for _, g := range o.gets {
			v, _ := lookupPattern(c, g, items[j].obj)
			out.PushBack(v)
		}
	}
	if outLen > 0 {
		c.Tx.SetObject(o.store, out, c.defaultExpire())
		c.signal(o.store)
	} else {
		c.Tx.Delete(o.store)
	}
	c.W.Int(outLen)
}

// sortCompare is Redis's sortCompare before DESC: numbers by score, ties
// by the elements' bytes; ALPHA by the BY values (a missing one first) or
// the elements' bytes.
func sortCompare(a, b *sortItem, alpha, byPattern bool) int {
	if !alpha {
		switch {
		case a.score > b.score:
			return 1
		case a.score < b.score:
			return -1
		}
		return bytes.Compare(a.obj, b.obj)
	}
	if byPattern {
		switch {
		case !a.hasCmp && !b.hasCmp:
			return 0
		case !a.hasCmp:
			return -1
		case !b.hasCmp:
			return 1
		}
		return bytes.Compare(a.cmp, b.cmp)
	}
	return bytes.Compare(a.obj, b.obj)
}
