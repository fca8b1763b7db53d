package command

import (
	"math"
	"strconv"

	"github.com/portico-io/portico/cachenode/keyspace"
)

// atoi parses an integer the way Redis's string2ll does: optional '-',
// digits, no '+', no leading zeros, no spaces.
func atoi(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	neg := b[0] == '-'
	d := b
	if neg {
		d = b[1:]
	}
	if len(d) == 0 || d[0] < '1' || d[0] > '9' {
		return 0, false
	}
	var v uint64
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
		if v > (math.MaxUint64-9)/10 {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	if neg {
		if v > 1<<63 {
			return 0, false
		}
		return -int64(v), true
	}
	if v > math.MaxInt64 {
		return 0, false
	}
	return int64(v), true
}

// stringAt returns the string entry at key, replying WRONGTYPE (ok=false)
// when key holds another type.
func (c *Ctx) stringAt(key []byte, count bool) (e *keyspace.Entry, ok bool) {
	if count {
		e = c.read(key)
	} else {
		e = c.Tx.Get(key)
	}
	if e != nil && e.Kind() != keyspace.KindString {
		c.W.Error(errWrongType)
		return nil, false
	}
	return e, true
}

func cmdGet(c *Ctx) {
	e, ok := c.stringAt(c.Args[1], true)
	if !ok {
		return
	}
	if e == nil {
		c.W.Null()
		return
	}
	c.W.Bulk(e.Str)
}

// expireArg converts an EX/PX/EXAT/PXAT argument into a deadline in unix
// ms, replying with Redis's error when it is not a positive integer.
func (c *Ctx) expireArg(opt string, arg []byte, cmd string) (int64, bool) {
	n, ok := atoi(arg)
	if !ok {
		c.W.Error(errNotInt)
		return 0, false
	}
	bad := func() (int64, bool) {
		c.W.Error("ERR invalid expire time in '" + cmd + "' command")
		return 0, false
	}
	if n <= 0 {
		return bad()
	}
	now := c.Tx.Now()
	switch opt {
	case "ex":
		if n > (math.MaxInt64-now)/1000 {
			return bad()
		}
		return now + n*1000, true
	case "px":
		if n > math.MaxInt64-now {
			return bad()
		}
		return now + n, true
	case "exat":
		if n > math.MaxInt64/1000 {
			return bad()
		}
		return n * 1000, true
	default: // pxat
		return n, true
	}
}

func lower(b []byte) string {
	out := make([]byte, len(b))
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return string(out)
}

func cmdSet(c *Ctx) {
	key, val := c.Args[1], c.Args[2]
	var nx, xx, get, keepTTL, expSet bool
	var expireAt int64
	var ifeq []byte
	hasIfeq := false
	for i := 3; i < len(c.Args); i++ {
		opt := lower(c.Args[i])
		switch opt {
		case "nx":
			if xx || hasIfeq {
				c.W.Error(errSyntax)
				return
			}
			nx = true
		case "xx":
			if nx || hasIfeq {
				c.W.Error(errSyntax)
				return
			}
			xx = true
		case "get":
			get = true
		case "keepttl":
			if expSet {
				c.W.Error(errSyntax)
				return
			}
			keepTTL = true
		case "ex", "px", "exat", "pxat":
			if expSet || keepTTL || i+1 >= len(c.Args) {
				c.W.Error(errSyntax)
				return
			}
			i++
			at, ok := c.expireArg(opt, c.Args[i], "set")
			if !ok {
				return
			}
			expireAt, expSet = at, true
		case "ifeq":
			if nx || xx || hasIfeq || i+1 >= len(c.Args) {
				c.W.Error(errSyntax)
				return
			}
			i++
			ifeq, hasIfeq = c.Args[i], true
		default:
			c.W.Error(errSyntax)
			return
		}
	}
	if !c.valueOK(len(val)) {
		return
	}
	var old *keyspace.Entry
	if get || hasIfeq {
		var ok bool
		if old, ok = c.stringAt(key, get); !ok {
			return
		}
	} else {
		old = c.Tx.Get(key)
	}
	if get && old != nil {
		// Reply before the overwrite below reuses old's buffer.
		c.W.Bulk(old.Str)
	}
	apply := true
	switch {
	case nx && old != nil, xx && old == nil:
		apply = false
	case hasIfeq:
		apply = old != nil && string(old.Str) == string(ifeq)
	}
	if apply {
		switch {
		case keepTTL && old != nil:
			expireAt = old.ExpireAt()
		case !expSet:
			expireAt = c.defaultExpire()
		}
		c.Tx.SetStringOver(key, old, val, expireAt)
	}
	switch {
	case get && old == nil:
		c.W.Null()
	case get:
	case apply:
		c.W.OK()
	default:
		c.W.Null()
	}
}

func cmdSetNX(c *Ctx) {
	if !c.valueOK(len(c.Args[2])) {
		return
	}
	if c.Tx.Get(c.Args[1]) != nil {
		c.W.Int(0)
		return
	}
	c.Tx.SetString(c.Args[1], c.Args[2], c.defaultExpire())
	c.W.Int(1)
}

func setWithTTL(c *Ctx, opt, cmd string) {
	at, ok := c.expireArg(opt, c.Args[2], cmd)
	if !ok || !c.valueOK(len(c.Args[3])) {
		return
	}
	c.Tx.SetString(c.Args[1], c.Args[3], at)
	c.W.OK()
}

func cmdSetEX(c *Ctx)  { setWithTTL(c, "ex", "setex") }
func cmdPSetEX(c *Ctx) { setWithTTL(c, "px", "psetex") }

func cmdGetDel(c *Ctx) {
	e, ok := c.stringAt(c.Args[1], true)
	if !ok {
		return
	}
	if e == nil {
		c.W.Null()
		return
	}
	c.W.Bulk(e.Str)
	c.Tx.Delete(c.Args[1])
}

func cmdGetEx(c *Ctx) {
	key := c.Args[1]
	var at int64
	set, persist := false, false
	for i := 2; i < len(c.Args); i++ {
		opt := lower(c.Args[i])
		switch opt {
		case "ex", "px", "exat", "pxat":
			if set || persist || i+1 >= len(c.Args) {
				c.W.Error(errSyntax)
				return
			}
			i++
			v, ok := c.expireArg(opt, c.Args[i], "getex")
			if !ok {
				return
			}
			at, set = v, true
		case "persist":
			if set {
				c.W.Error(errSyntax)
				return
			}
			persist = true
		default:
			c.W.Error(errSyntax)
			return
		}
	}
	e, ok := c.stringAt(key, true)
	if !ok {
		return
	}
	if e == nil {
		c.W.Null()
		return
	}
	c.W.Bulk(e.Str)
	switch {
	case set && at <= c.Tx.Now():
		c.Tx.Delete(key)
	case set:
		c.Tx.SetExpire(key, e, at)
	case persist:
		c.Tx.SetExpire(key, e, 0)
	}
}

func cmdMGet(c *Ctx) {
	c.W.Array(len(c.Args) - 1)
	for _, k := range c.Args[1:] {
		e := c.read(k)
		if e == nil || e.Kind() != keyspace.KindString {
			c.W.Null()
			continue
		}
		c.W.Bulk(e.Str)
	}
}

func msetArgsOK(c *Ctx) bool {
	if len(c.Args)%2 != 1 {
		c.W.Error("ERR wrong number of arguments for '" + c.spec.Name + "' command")
		return false
	}
	for i := 2; i < len(c.Args); i += 2 {
		if !c.valueOK(len(c.Args[i])) {
			return false
		}
	}
	return true
}

func cmdMSet(c *Ctx) {
	if !msetArgsOK(c) {
		return
	}
	exp := c.defaultExpire()
	for i := 1; i < len(c.Args); i += 2 {
		c.Tx.SetString(c.Args[i], c.Args[i+1], exp)
	}
	c.W.OK()
}

func cmdMSetNX(c *Ctx) {
	if !msetArgsOK(c) {
		return
	}
	for i := 1; i < len(c.Args); i += 2 {
		if c.Tx.Get(c.Args[i]) != nil {
			c.W.Int(0)
			return
		}
	}
	exp := c.defaultExpire()
	for i := 1; i < len(c.Args); i += 2 {
		c.Tx.SetString(c.Args[i], c.Args[i+1], exp)
	}
	c.W.Int(1)
}

func cmdAppend(c *Ctx) {
	key, add := c.Args[1], c.Args[2]
	e, ok := c.stringAt(key, false)
	if !ok {
		return
	}
	if e == nil {
		if !c.valueOK(len(add)) {
			return
		}
		e = c.Tx.SetString(key, add, c.defaultExpire())
		c.W.Int(int64(len(e.Str)))
		return
	}
	n := len(e.Str) + len(add)
	if n > 512<<20 {
		c.W.Error(errStringLimit)
		return
	}
	if !c.valueOK(n) {
		return
	}
	c.Tx.Append(key, e, add)
	c.W.Int(int64(n))
}

func cmdStrlen(c *Ctx) {
	e, ok := c.stringAt(c.Args[1], true)
	if !ok {
		return
	}
	if e == nil {
		c.W.Int(0)
		return
	}
	c.W.Int(int64(len(e.Str)))
}

func incrBy(c *Ctx, delta int64) {
	key := c.Args[1]
	e, ok := c.stringAt(key, false)
	if !ok {
		return
	}
	var cur int64
	if e != nil {
		if cur, ok = atoi(e.Str); !ok {
			c.W.Error(errNotInt)
			return
		}
	}
	if (delta > 0 && cur > math.MaxInt64-delta) || (delta < 0 && cur < math.MinInt64-delta) {
		c.W.Error(errOverflow)
		return
	}
	cur += delta
	var buf [24]byte
	v := strconv.AppendInt(buf[:0], cur, 10)
	if e == nil {
		c.Tx.SetString(key, v, c.defaultExpire())
	} else {
		c.Tx.Rewrite(key, e, v)
	}
	c.W.Int(cur)
}

func cmdIncr(c *Ctx) { incrBy(c, 1) }
func cmdDecr(c *Ctx) { incrBy(c, -1) }

func cmdIncrBy(c *Ctx) {
	d, ok := atoi(c.Args[2])
	if !ok {
		c.W.Error(errNotInt)
		return
	}
	incrBy(c, d)
}

func cmdDecrBy(c *Ctx) {
	d, ok := atoi(c.Args[2])
	if !ok {
		c.W.Error(errNotInt)
		return
	}
	if d == math.MinInt64 {
		c.W.Error("ERR decrement would overflow")
		return
	}
	incrBy(c, -d)
}

func cmdIncrByFloat(c *Ctx) {
	key := c.Args[1]
	d, ok := parseFloat(c.Args[2])
	if !ok {
		c.W.Error(errNotFloat)
		return
	}
	e, ok := c.stringAt(key, false)
	if !ok {
		return
	}
	var cur float64
	if e != nil {
		if cur, ok = parseFloat(e.Str); !ok {
			c.W.Error(errNotFloat)
			return
		}
	}
	cur += d
	if math.IsNaN(cur) || math.IsInf(cur, 0) {
		c.W.Error(errNaN)
		return
	}
	v := strconv.FormatFloat(cur, 'f', -1, 64)
	if e == nil {
		c.Tx.SetString(key, []byte(v), c.defaultExpire())
	} else {
		c.Tx.Rewrite(key, e, []byte(v))
	}
	c.W.BulkString(v)
}

// cmdCAS is CAS key expected new [EX seconds|PX milliseconds]: it sets key
// to new when its current string value equals expected and replies 1, else
// 0 (also when key is missing). Without EX/PX the key keeps its TTL.
func cmdCAS(c *Ctx) {
	key, expected, val := c.Args[1], c.Args[2], c.Args[3]
	var at int64
	set := false
	if len(c.Args) != 4 {
		if len(c.Args) != 6 {
			c.W.Error(errSyntax)
			return
		}
		opt := lower(c.Args[4])
		if opt != "ex" && opt != "px" {
			c.W.Error(errSyntax)
			return
		}
		var ok bool
		if at, ok = c.expireArg(opt, c.Args[5], "cas"); !ok {
			return
		}
		set = true
	}
	if !c.valueOK(len(val)) {
		return
	}
	e, ok := c.stringAt(key, true)
	if !ok {
		return
	}
	if e == nil || string(e.Str) != string(expected) {
		c.W.Int(0)
		return
	}
	if !set {
		at = e.ExpireAt()
	}
	c.Tx.SetString(key, val, at)
	c.W.Int(1)
}
