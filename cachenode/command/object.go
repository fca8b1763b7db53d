package command

import (
	"github.com/portico-io/portico/cachenode/evict"
	"github.com/portico-io/portico/cachenode/keyspace"
)

// OBJECT ENCODING|REFCOUNT|IDLETIME|FREQ|HELP, answered as Redis 7.0 would:
// the encodings are those redis-server would report for the same value
// (exact for sorted sets and hashes, which track Redis's one-way listpack
// conversion, though a replica's or a copy's is judged by its contents;
// from the current contents for the other types, so a string APPENDed to
// stays "embstr" here where Redis says "raw", and a set that shrank back
// says "intset"). It reads keys without touching their access time, as
// Redis does.
//
// It registers only when no other file of the package has (a fuller OBJECT
// elsewhere wins whichever init runs first).
func init() {
	if _, ok := table["object"]; !ok {
		reg("object", -2, flagReadonly, 2, 2, 1, "generic", "2.2.3", []string{"RO"}, "A container for object introspection commands.", cmdObject)
	}
}

var objectHelp = []string{
	"OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"ENCODING <key>",
	"    Return the kind of internal representation used in order to store the value",
	"    associated with a <key>.",
	"FREQ <key>",
	"    Return the access frequency index of the <key>. The returned integer is",
	"    proportional to the logarithm of the recent access frequency of the key.",
	"IDLETIME <key>",
	"    Return the idle time of the <key>, that is the approximated number of",
	"    seconds elapsed since the last access to the key.",
	"REFCOUNT <key>",
	"    Return the number of references of the value associated with the specified",
	"    <key>.",
	"HELP",
	"    Prints this help.",
}

const lfuPolicyNote = " Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."

func cmdObject(c *Ctx) {
	sub := lower(c.Args[1])
	switch sub {
	case "help":
		if len(c.Args) != 2 {
			c.W.Error("ERR wrong number of arguments for 'object|help' command")
			return
		}
		c.W.Array(len(objectHelp))
		for _, l := range objectHelp {
			c.W.Simple(l)
		}
		return
	case "encoding", "refcount", "idletime", "freq":
	default:
		c.W.Error("ERR unknown subcommand '" + truncate(c.Args[1], 128) + "'. Try OBJECT HELP.")
		return
	}
	if len(c.Args) != 3 {
		c.W.Error("ERR wrong number of arguments for 'object|" + sub + "' command")
		return
	}
	e := c.Tx.Peek(c.Args[2])
	if e == nil {
		c.W.Null()
		return
	}
	lfu := c.NS.DB.Policy() == evict.AllKeysLFU
	switch sub {
	case "encoding":
		c.W.BulkString(encodingOf(e))
	case "refcount":
		// Redis shares the integers 0..9999 (OBJ_SHARED_REFCOUNT).
		if n, ok := atoi(e.Str); ok && e.Obj == nil && n >= 0 && n < 10000 {
			c.W.Int(2147483647)
			return
		}
		c.W.Int(1)
	case "idletime":
		if lfu {
			c.W.Error("ERR An LFU maxmemory policy is selected, idle time not tracked." + lfuPolicyNote)
			return
		}
		c.W.Int(int64(evict.IdleSeconds(e.Meta(), c.Tx.Now())))
	case "freq":
		if !lfu {
			c.W.Error("ERR An LFU maxmemory policy is not selected, access frequency not tracked." + lfuPolicyNote)
			return
		}
		c.W.Int(int64(evict.Counter(e.Meta(), c.Tx.Now())))
	}
}

// Redis 7.0's encoding limits (its defaults): set-max-intset-entries;
// embstr holds up to 44 bytes. A hash's is kept by the hash itself
// (keyspace.Object.HashListpack).
const (
	setMaxIntsetEntries = 512
	embstrMax           = 44
)

// encodingOf is what OBJECT ENCODING reports for e.
func encodingOf(e *keyspace.Entry) string {
	switch e.Kind() {
	case keyspace.KindString:
		if _, ok := atoi(e.Str); ok {
			return "int"
		}
		if len(e.Str) <= embstrMax {
			return "embstr"
		}
		return "raw"
	case keyspace.KindList:
		return "quicklist"
	case keyspace.KindSet:
		if len(e.Obj.Set) > setMaxIntsetEntries {
			return "hashtable"
		}
		for m := range e.Obj.Set {
			if _, ok := atoi([]byte(m)); !ok {
				return "hashtable"
			}
		}
		return "intset"
	case keyspace.KindHash:
		if e.Obj.HashListpack() {
			return "listpack"
		}
		return "hashtable"
	case keyspace.KindZset:
		return e.Obj.Zset.Encoding()
	}
	return "unknown"
}
