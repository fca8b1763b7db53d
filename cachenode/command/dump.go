package command

import (
	"errors"

	"github.com/portico-io/portico/cachenode/dump"
	"github.com/portico-io/portico/cachenode/evict"
	"github.com/portico-io/portico/cachenode/keyspace"
)

// DUMP and RESTORE use package dump's value encoding, not RDB: payloads
// move between cachenodes, not to or from redis-server.

const (
	errDumpPayload = "ERR DUMP payload version or checksum are wrong"
	errBadFormat   = "ERR Bad data format"
	errBusyKey     = "BUSYKEY Target key name already exists."
	errRestoreTTL  = "ERR Invalid TTL value, must be >= 0"
	errIdleTime    = "ERR Invalid IDLETIME value, must be >= 0"
	errFreq        = "ERR Invalid FREQ value, must be >= 0 and <= 255"
)

func init() {
	reg("dump", 2, flagReadonly, 1, 1, 1, "generic", "2.6.0", ksRO, "Returns a serialized representation of the value stored at a key.", cmdDump)
	reg("restore", -4, flagWrite|flagDenyOOM, 1, 1, 1, "generic", "2.6.0", ksOW, "Creates a key from the serialized representation of a value.", cmdRestore)
}

func cmdDump(c *Ctx) {
	e := c.Tx.Get(c.Args[1])
	if e == nil {
		c.W.Null()
		return
	}
	c.W.Bulk(dump.AppendValue(nil, e))
}

// cmdRestore follows Redis's restoreCommand: options first, then BUSYKEY,
// then the TTL, then the payload; a TTL already in the past stores nothing
// (deleting the old key under REPLACE) and still replies OK. The payload's
// own deadline is ignored: the ttl argument decides, as in Redis.
func cmdRestore(c *Ctx) {
	key := c.Args[1]
	var replace, absTTL bool
	idle, freq := int64(-1), int64(-1)
	for j := 4; j < len(c.Args); j++ {
		more := len(c.Args) - j - 1
		switch {
		case eqFold(c.Args[j], "replace"):
			replace = true
		case eqFold(c.Args[j], "absttl"):
			absTTL = true
		case eqFold(c.Args[j], "idletime") && more >= 1 && freq == -1:
			n, ok := atoi(c.Args[j+1])
			if !ok {
				c.W.Error(errNotInt)
				return
			}
			if n < 0 {
				c.W.Error(errIdleTime)
				return
			}
			idle = n
			j++
		case eqFold(c.Args[j], "freq") && more >= 1 && idle == -1:
			n, ok := atoi(c.Args[j+1])
			if !ok {
				c.W.Error(errNotInt)
				return
			}
			if n < 0 || n > 255 {
				c.W.Error(errFreq)
				return
			}
			freq = n
			j++
		default:
			c.W.Error(errSyntax)
			return
		}
	}
	if !replace && c.Tx.Get(key) != nil {
		c.W.Error(errBusyKey)
		return
	}
	ttl, ok := atoi(c.Args[2])
	if !ok {
		c.W.Error(errNotInt)
		return
	}
	if ttl < 0 {
		c.W.Error(errRestoreTTL)
		return
	}
	v, err := dump.DecodeValue(c.Args[3])
	if err != nil {
		if errors.Is(err, dump.ErrChecksum) || errors.Is(err, dump.ErrVersion) {
			c.W.Error(errDumpPayload)
		} else {
			c.W.Error(errBadFormat)
		}
		return
	}
	if v.Kind == keyspace.KindString && !c.valueOK(len(v.Str)) {
		return
	}
	now := c.Tx.Now()
	if ttl != 0 && !absTTL {
		ttl += now
	}
	if ttl != 0 && ttl <= now {
		if replace {
			c.Tx.Delete(key)
		}
		c.W.OK()
		return
	}
	v.ExpireAt = ttl
	e := v.Store(c.Tx, key)
	c.signal(key)
	if e != nil {
		p := c.NS.DB.Policy()
		switch {
		case idle >= 0 && p != evict.AllKeysLFU:
			// LRU metadata is a clock in seconds (package evict).
			c.Tx.SetMeta(e, uint32(now/1000)-uint32(min(idle, now/1000)))
		case freq >= 0 && p == evict.AllKeysLFU:
			// LFU metadata: 24-bit minutes of the last decrement, 8-bit counter.
			c.Tx.SetMeta(e, (uint32(now/60000)&0xffffff)<<8|uint32(freq))
		}
	}
	c.W.OK()
}
