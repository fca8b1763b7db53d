package command

import (
	"math"
	"strconv"

	"github.com/portico-io/portico/cachenode/keyspace"
)

func cmdDel(c *Ctx) {
	var n int64
	for _, k := range c.Args[1:] {
		if c.Tx.Delete(k) {
			n++
		}
	}
	c.W.Int(n)
}

func cmdExists(c *Ctx) {
	var n int64
	for _, k := range c.Args[1:] {
		if c.Tx.Get(k) != nil {
			n++
		}
	}
	c.W.Int(n)
}

// expireGeneric implements EXPIRE, PEXPIRE, EXPIREAT and PEXPIREAT with the
// NX/XX/GT/LT conditions of Redis 7 (a key without TTL counts as infinite).
func expireGeneric(c *Ctx, unit int64, absolute bool) {
	key := c.Args[1]
	n, ok := atoi(c.Args[2])
	if !ok {
		c.W.Error(errNotInt)
		return
	}
	var nx, xx, gt, lt bool
	for _, a := range c.Args[3:] {
		switch lower(a) {
		case "nx":
			nx = true
		case "xx":
			xx = true
		case "gt":
			gt = true
		case "lt":
			lt = true
		default:
			c.W.Error("ERR Unsupported option " + truncate(a, 64))
			return
		}
	}
	if nx && (xx || gt || lt) {
		c.W.Error("ERR NX and XX, GT or LT options at the same time are not compatible")
		return
	}
	if gt && lt {
		c.W.Error("ERR GT and LT options at the same time are not compatible")
		return
	}
	now := c.Tx.Now()
	if n > math.MaxInt64/unit || n < math.MinInt64/unit {
		c.W.Error("ERR invalid expire time in '" + c.spec.Name + "' command")
		return
	}
	at := n * unit
	if !absolute {
		if (at > 0 && now > math.MaxInt64-at) || (at < 0 && now < math.MinInt64-at) {
			c.W.Error("ERR invalid expire time in '" + c.spec.Name + "' command")
			return
		}
		at += now
	}
	e := c.Tx.Get(key)
	if e == nil {
		c.W.Int(0)
		return
	}
	cur := e.ExpireAt()
	switch {
	case nx && cur != 0, xx && cur == 0,
		gt && (cur == 0 || at <= cur),
		lt && cur != 0 && at >= cur:
		c.W.Int(0)
		return
	}
	if at <= now {
		c.Tx.Delete(key)
	} else {
		c.Tx.SetExpire(key, e, at)
	}
	c.W.Int(1)
}

func cmdExpire(c *Ctx)    { expireGeneric(c, 1000, false) }
func cmdPExpire(c *Ctx)   { expireGeneric(c, 1, false) }
func cmdExpireAt(c *Ctx)  { expireGeneric(c, 1000, true) }
func cmdPExpireAt(c *Ctx) { expireGeneric(c, 1, true) }

func cmdPersist(c *Ctx) {
	e := c.Tx.Get(c.Args[1])
	if e == nil || e.ExpireAt() == 0 {
		c.W.Int(0)
		return
	}
	c.Tx.SetExpire(c.Args[1], e, 0)
	c.W.Int(1)
}

func ttl(c *Ctx, ms bool) {
	e := c.Tx.Get(c.Args[1])
	switch {
	case e == nil:
		c.W.Int(-2)
	case e.ExpireAt() == 0:
		c.W.Int(-1)
	case ms:
		c.W.Int(e.ExpireAt() - c.Tx.Now())
	default:
		c.W.Int((e.ExpireAt() - c.Tx.Now() + 500) / 1000)
	}
}

func cmdTTL(c *Ctx)  { ttl(c, false) }
func cmdPTTL(c *Ctx) { ttl(c, true) }

func cmdType(c *Ctx) {
	e := c.Tx.Get(c.Args[1])
	if e == nil {
		c.W.Simple("none")
		return
	}
	c.W.Simple(e.Kind().String())
}

func cmdRename(c *Ctx) {
	e := c.Tx.Get(c.Args[1])
	if e == nil {
		c.W.Error(errNoSuchKey)
		return
	}
	c.Tx.Rename(c.Args[1], c.Args[2], e)
	c.signal(c.Args[2])
	c.W.OK()
}

// maxKeysReply bounds a KEYS reply so one call cannot build an unbounded
// buffer; SCAN is the way to walk large keyspaces.
const maxKeysReply = 1 << 20

func cmdKeys(c *Ctx) {
	var out []string
	c.db().Scan(0, math.MaxInt, func(k string, _ *keyspace.Entry) {
		if len(out) < maxKeysReply && globMatch(c.Args[1], []byte(k)) {
			out = append(out, k)
		}
	})
	c.W.BulkStrings(out)
}

func cmdScan(c *Ctx) {
	cur, err := strconv.ParseUint(string(c.Args[1]), 10, 64)
	if err != nil {
		c.W.Error(errInvalidCur)
		return
	}
	count := 10
	var match []byte
	typ := ""
	for i := 2; i < len(c.Args); i += 2 {
		if i+1 >= len(c.Args) {
			c.W.Error(errSyntax)
			return
		}
		switch lower(c.Args[i]) {
		case "match":
			match = c.Args[i+1]
		case "count":
			n, ok := atoi(c.Args[i+1])
			if !ok {
				c.W.Error(errNotInt)
				return
			}
			if n < 1 {
				c.W.Error(errSyntax)
				return
			}
			count = int(min(n, 1<<20))
		case "type":
			typ = lower(c.Args[i+1])
		default:
			c.W.Error(errSyntax)
			return
		}
	}
	if cur >= uint64(c.db().NumShards()) {
		cur = 0 // an unknown cursor restarts, as Redis tolerates
	}
	var out []string
	next := c.db().Scan(cur, count, func(k string, e *keyspace.Entry) {
		if match != nil && !globMatch(match, []byte(k)) {
			return
		}
		if typ != "" && e.Kind().String() != typ {
			return
		}
		out = append(out, k)
	})
	c.W.Array(2)
	c.W.BulkString(strconv.FormatUint(next, 10))
	c.W.BulkStrings(out)
}
