package cachenode_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	wrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"
	notInt    = "ERR value is not an integer or out of range"
	syntax    = "ERR syntax error"
)

func TestStringCommands(t *testing.T) {
	n := startNode(t)
	c := n.client(t)
	exat := n.clock.AtSec(100 * time.Second)
	pxat := n.clock.At(100 * time.Second)
	run(t, c, []step{
		do("GET", "s").is(nil),
		do("SET", "s", "v").is("OK"),
		do("GET", "s").is("v"),
		do("SET", "s", "w", "NX").is(nil),
		do("SET", "s", "w", "XX").is("OK"),
		do("SET", "nx", "w", "XX").is(nil),
		do("SET", "s", "x", "GET").is("w"),
		do("SET", "new", "x", "NX", "GET").is(nil),
		do("SET", "s", "y", "EX", "10").is("OK"),
		do("PTTL", "s").is(10000),
		do("SET", "s", "z", "KEEPTTL").is("OK"),
		do("PTTL", "s").is(10000),
		do("SET", "s", "z", "PX", "1500").is("OK"),
		do("PTTL", "s").is(1500),
		do("SET", "s", "z", "EXAT", exat).is("OK"),
		do("TTL", "s").is(100),
		do("SET", "s", "z", "PXAT", pxat).is("OK"),
		do("PTTL", "s").is(100000),
		do("SET", "s", "z").is("OK"),
		do("TTL", "s").is(-1),
		do("SET", "s", "v", "EX", "0").fails("ERR invalid expire time in 'set' command"),
		do("SET", "s", "v", "EX", "-5").fails("ERR invalid expire time in 'set' command"),
		do("SET", "s", "v", "EX", "abc").fails(notInt),
		do("SET", "s", "v", "NX", "XX").fails(syntax),
		do("SET", "s", "v", "EX", "1", "PX", "1").fails(syntax),
		do("SET", "s", "v", "KEEPTTL", "EX", "1").fails(syntax),
		do("SET", "s", "v", "BOGUS").fails(syntax),
		do("SET", "s").fails("ERR wrong number of arguments for 'set' command"),
		// IFEQ (Redis 8 compare-and-set)
		do("SET", "s", "v2", "IFEQ", "nope").is(nil),
		do("SET", "s", "v2", "IFEQ", "z").is("OK"),
		do("GET", "s").is("v2"),
		do("SET", "absent", "v", "IFEQ", "x").is(nil),
		do("EXISTS", "absent").is(0),
		do("SET", "s", "v", "IFEQ", "x", "NX").fails(syntax),
		// CAS
		do("CAS", "s", "v2", "v3").is(1),
		do("CAS", "s", "v2", "v4").is(0),
		do("CAS", "absent", "a", "b").is(0),
		do("CAS", "s", "v3", "v4", "EX", "5").is(1),
		do("TTL", "s").is(5),
		do("CAS", "s", "v4", "v5", "EX").fails(syntax),
		do("CAS", "s", "v4", "v5", "ZZ", "1").fails(syntax),
		// SETNX/SETEX/PSETEX
		do("SETNX", "k1", "a").is(1),
		do("SETNX", "k1", "b").is(0),
		do("SETEX", "k2", "7", "a").is("OK"),
		do("TTL", "k2").is(7),
		do("SETEX", "k2", "0", "a").fails("ERR invalid expire time in 'setex' command"),
		do("PSETEX", "k3", "700", "a").is("OK"),
		do("PTTL", "k3").is(700),
		// GETDEL/GETEX
		do("GETDEL", "k1").is("a"),
		do("GETDEL", "k1").is(nil),
		do("SET", "k4", "v").is("OK"),
		do("GETEX", "k4", "EX", "50").is("v"),
		do("TTL", "k4").is(50),
		do("GETEX", "k4", "PERSIST").is("v"),
		do("TTL", "k4").is(-1),
		do("GETEX", "k4", "PX", "10", "EX", "1").fails(syntax),
		do("GETEX", "missing").is(nil),
		// MGET/MSET/MSETNX
		do("MSET", "m1", "1", "m2", "2").is("OK"),
		do("MSET", "m1", "1", "m2").fails("ERR wrong number of arguments for 'mset' command"),
		do("MGET", "m1", "nope", "m2").is([]any{"1", nil, "2"}),
		do("MSETNX", "m3", "3", "m1", "x").is(0),
		do("EXISTS", "m3").is(0),
		do("MSETNX", "m3", "3", "m4", "4").is(1),
		// APPEND/STRLEN
		do("APPEND", "ap", "foo").is(3),
		do("APPEND", "ap", "bar").is(6),
		do("GET", "ap").is("foobar"),
		do("STRLEN", "ap").is(6),
		do("STRLEN", "nope").is(0),
		// counters
		do("INCR", "n").is(1),
		do("INCRBY", "n", "10").is(11),
		do("DECR", "n").is(10),
		do("DECRBY", "n", "4").is(6),
		do("INCRBY", "n", "x").fails(notInt),
		do("SET", "big", "9223372036854775807").is("OK"),
		do("INCR", "big").fails("ERR increment or decrement would overflow"),
		do("SET", "f", "01").is("OK"),
		do("INCR", "f").fails(notInt),
		do("SET", "f", "10.5").is("OK"),
		do("INCRBYFLOAT", "f", "0.1").is("10.6"),
		do("INCRBYFLOAT", "f", "-5").is("5.6"),
		do("INCRBYFLOAT", "f", "abc").fails("ERR value is not a valid float"),
		do("INCRBYFLOAT", "f", "inf").fails("ERR increment would produce NaN or Infinity"),
		do("INCRBYFLOAT", "fnew", "3").is("3"),
		// WRONGTYPE on strings
		do("LPUSH", "list", "a").is(1),
		do("GET", "list").fails(wrongType),
		do("INCR", "list").fails(wrongType),
		do("APPEND", "list", "x").fails(wrongType),
		do("SET", "list", "x", "GET").fails(wrongType),
		do("SET", "list", "now-a-string").is("OK"),
		do("TYPE", "list").is("string"),
		do("MGET", "list", "m1").is([]any{"now-a-string", "1"}),
	})
}

func TestKeyCommands(t *testing.T) {
	n := startNode(t)
	c := n.client(t)
	run(t, c, []step{
		do("MSET", "a", "1", "b", "2", "c", "3").is("OK"),
		do("EXISTS", "a", "b", "zz", "a").is(3),
		do("DEL", "a", "zz").is(1),
		do("UNLINK", "b", "c").is(2),
		do("DBSIZE").is(0),
		do("SET", "k", "v").is("OK"),
		do("EXPIRE", "k", "100").is(1),
		do("TTL", "k").is(100),
		do("EXPIRE", "k", "50", "GT").is(0),
		do("EXPIRE", "k", "500", "GT").is(1),
		do("EXPIRE", "k", "50", "LT").is(1),
		do("EXPIRE", "k", "60", "NX").is(0),
		do("EXPIRE", "k", "60", "XX").is(1),
		do("EXPIRE", "k", "60", "NX", "XX").fails("ERR NX and XX, GT or LT options at the same time are not compatible"),
		do("EXPIRE", "k", "60", "GT", "LT").fails("ERR GT and LT options at the same time are not compatible"),
		do("EXPIRE", "k", "x").fails(notInt),
		do("PEXPIRE", "k", "1234").is(1),
		do("PTTL", "k").is(1234),
		do("EXPIREAT", "k", n.clock.AtSec(30*time.Second)).is(1),
		do("TTL", "k").is(30),
		do("PEXPIREAT", "k", n.clock.At(3*time.Second)).is(1),
		do("PTTL", "k").is(3000),
		do("PERSIST", "k").is(1),
		do("PERSIST", "k").is(0),
		do("TTL", "k").is(-1),
		do("TTL", "missing").is(-2),
		do("PTTL", "missing").is(-2),
		do("EXPIRE", "missing", "10").is(0),
		do("EXPIRE", "k", "-1").is(1), // a deadline in the past deletes
		do("EXISTS", "k").is(0),
		do("TYPE", "missing").is("none"),
		do("SET", "src", "v", "EX", "100").is("OK"),
		do("RENAME", "src", "dst").is("OK"),
		do("GET", "dst").is("v"),
		do("TTL", "dst").is(100),
		do("EXISTS", "src").is(0),
		do("RENAME", "src", "dst").fails("ERR no such key"),
		do("RENAME", "dst", "dst").is("OK"),
		do("SADD", "aset", "m").is(1),
		do("HSET", "ahash", "f", "v").is(1),
		do("TYPE", "aset").is("set"),
		do("TYPE", "ahash").is("hash"),
		do("TYPE", "dst").is("string"),
	})
	for i := 0; i < 50; i++ {
		c.Set(ctx(t), "user:"+string(rune('a'+i%26))+string(rune('0'+i/26)), "x", 0)
	}
	keys, err := c.Keys(ctx(t), "user:a*").Result()
	if err != nil || len(keys) != 2 {
		t.Fatalf("KEYS user:a* = %v, %v; want 2 keys", keys, err)
	}
	keys, _ = c.Keys(ctx(t), "user:[ab]?").Result()
	if len(keys) != 4 {
		t.Fatalf("KEYS user:[ab]? = %v, want 4", keys)
	}
	// SCAN returns every key exactly once over a full iteration here (no
	// writes during the scan), honouring MATCH and TYPE.
	seen := map[string]int{}
	var cur uint64
	for {
		ks, next, err := c.Scan(ctx(t), cur, "user:*", 5).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range ks {
			seen[k]++
		}
		if cur = next; cur == 0 {
			break
		}
	}
	if len(seen) != 50 {
		t.Fatalf("SCAN MATCH user:* saw %d keys, want 50", len(seen))
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("SCAN returned %s %d times", k, n)
		}
	}
	ks, _, err := c.ScanType(ctx(t), 0, "", 100000, "set").Result()
	if err != nil || len(ks) != 1 || ks[0] != "aset" {
		t.Fatalf("SCAN TYPE set = %v, %v", ks, err)
	}
	run(t, c, []step{
		do("SCAN", "abc").fails("ERR invalid cursor"),
		do("SCAN", "0", "COUNT", "0").fails(syntax),
		do("SCAN", "0", "BOGUS", "1").fails(syntax),
		do("FLUSHDB").is("OK"),
		do("DBSIZE").is(0),
	})
}

func TestListCommands(t *testing.T) {
	n := startNode(t)
	c := n.client(t)
	run(t, c, []step{
		do("RPUSH", "l", "a", "b", "c").is(3),
		do("LPUSH", "l", "z", "y").is(5),
		do("LRANGE", "l", "0", "-1").is([]any{"y", "z", "a", "b", "c"}),
		do("LRANGE", "l", "-2", "100").is([]any{"b", "c"}),
		do("LRANGE", "l", "3", "1").is([]any{}),
		do("LRANGE", "nope", "0", "-1").is([]any{}),
		do("LINDEX", "l", "0").is("y"),
		do("LINDEX", "l", "-1").is("c"),
		do("LINDEX", "l", "99").is(nil),
		do("LLEN", "l").is(5),
		do("LPOP", "l").is("y"),
		do("RPOP", "l").is("c"),
		do("LPOP", "l", "2").is([]any{"z", "a"}),
		do("RPOP", "l", "5").is([]any{"b"}),
		do("EXISTS", "l").is(0), // an emptied list is deleted
		do("LPOP", "l").is(nil),
		do("LPOP", "l", "2").is(nil),
		do("LPOP", "l", "-1").fails("ERR value is out of range, must be positive"),
		do("RPUSH", "r", "a", "b", "a", "c", "a").is(5),
		do("LREM", "r", "-2", "a").is(2),
		do("LRANGE", "r", "0", "-1").is([]any{"a", "b", "c"}),
		do("LREM", "r", "0", "a").is(1),
		do("LREM", "r", "x", "a").fails(notInt),
		do("RPUSH", "t", "1", "2", "3", "4", "5").is(5),
		do("LTRIM", "t", "1", "-2").is("OK"),
		do("LRANGE", "t", "0", "-1").is([]any{"2", "3", "4"}),
		do("LTRIM", "t", "5", "10").is("OK"),
		do("EXISTS", "t").is(0),
		do("SET", "s", "v").is("OK"),
		do("LPUSH", "s", "a").fails(wrongType),
		do("LRANGE", "s", "0", "1").fails(wrongType),
		do("LLEN", "s").fails(wrongType),
		do("RPOP", "s").fails(wrongType),
		do("LPUSH", "x").fails("ERR wrong number of arguments for 'lpush' command"),
	})
}

func TestSetCommands(t *testing.T) {
	n := startNode(t)
	c := n.client(t)
	run(t, c, []step{
		do("SADD", "s1", "a", "b", "c", "a").is(3),
		do("SADD", "s2", "b", "c", "d").is(3),
		do("SCARD", "s1").is(3),
		do("SISMEMBER", "s1", "a").is(1),
		do("SISMEMBER", "s1", "z").is(0),
		do("SMISMEMBER", "s1", "a", "z").is([]any{int64(1), int64(0)}),
		do("SMEMBERS", "s1").is([]any{"a", "b", "c"}),
		do("SINTER", "s1", "s2").is([]any{"b", "c"}),
		do("SINTER", "s1", "nope").is([]any{}),
		do("SUNION", "s1", "s2").is([]any{"a", "b", "c", "d"}),
		do("SDIFF", "s1", "s2").is([]any{"a"}),
		do("SREM", "s1", "a", "z").is(1),
		do("SRANDMEMBER", "nope").is(nil),
		do("SPOP", "nope").is(nil),
		do("SET", "str", "v").is("OK"),
		do("SADD", "str", "a").fails(wrongType),
		do("SINTER", "s1", "str").fails(wrongType),
		do("SPOP", "s1", "-1").fails("ERR value is out of range, must be positive"),
	})
	got, err := c.SPopN(ctx(t), "s2", 2).Result()
	if err != nil || len(got) != 2 {
		t.Fatalf("SPOP s2 2 = %v, %v", got, err)
	}
	if n, _ := c.SCard(ctx(t), "s2").Result(); n != 1 {
		t.Fatalf("SCARD after SPOP 2 = %d, want 1", n)
	}
	r, err := c.SRandMemberN(ctx(t), "s1", -5).Result()
	if err != nil || len(r) != 5 {
		t.Fatalf("SRANDMEMBER s1 -5 = %v, %v", r, err)
	}
	r, _ = c.SRandMemberN(ctx(t), "s1", 10).Result()
	if len(r) != 2 {
		t.Fatalf("SRANDMEMBER s1 10 = %v, want the 2 members", r)
	}
	m, err := c.SPop(ctx(t), "s1").Result()
	if err != nil || (m != "b" && m != "c") {
		t.Fatalf("SPOP s1 = %q, %v", m, err)
	}
}

func TestHashCommands(t *testing.T) {
	n := startNode(t)
	c := n.client(t)
	run(t, c, []step{
		do("HSET", "h", "a", "1", "b", "2").is(2),
		do("HSET", "h", "a", "9", "c", "3").is(1),
		do("HSET", "h", "a").fails("ERR wrong number of arguments for 'hset' command"),
		do("HGET", "h", "a").is("9"),
		do("HGET", "h", "zz").is(nil),
		do("HMGET", "h", "a", "zz", "c").is([]any{"9", nil, "3"}),
		do("HLEN", "h").is(3),
		do("HEXISTS", "h", "b").is(1),
		do("HEXISTS", "h", "zz").is(0),
		do("HKEYS", "h").is([]any{"a", "b", "c"}),
		do("HVALS", "h").is([]any{"9", "2", "3"}),
		do("HGETALL", "h").is(map[any]any{"a": "9", "b": "2", "c": "3"}),
		do("HINCRBY", "h", "a", "5").is(14),
		do("HINCRBY", "h", "new", "-2").is(-2),
		do("HINCRBY", "h", "a", "x").fails(notInt),
		do("HSET", "h", "s", "abc").is(1),
		do("HINCRBY", "h", "s", "1").fails("ERR hash value is not an integer"),
		do("HDEL", "h", "a", "b", "zz").is(2),
		do("HDEL", "h", "c", "new", "s").is(3),
		do("EXISTS", "h").is(0),
		do("HGETALL", "h").is(map[any]any{}),
		do("SET", "str", "v").is("OK"),
		do("HGET", "str", "a").fails(wrongType),
		do("HSET", "str", "a", "b").fails(wrongType),
	})
}

func TestConnectionAndServerCommands(t *testing.T) {
	n := startNode(t)
	c := n.client(t)
	run(t, c, []step{
		do("PING").is("PONG"),
		do("PING", "hi").is("hi"),
		do("ECHO", "x y").is("x y"),
		do("SELECT", "0").is("OK"),
		do("SELECT", "1").fails("ERR DB index is out of range"),
		do("CLIENT", "SETNAME", "worker-1").is("OK"),
		do("CLIENT", "GETNAME").is("worker-1"),
		do("CLIENT", "SETNAME", "bad name").fails("ERR Client names cannot contain spaces, newlines or special characters."),
		do("CLIENT", "SETINFO", "LIB-NAME", "mylib").is("OK"),
		do("CLIENT", "SETINFO", "BOGUS", "x").fails("ERR Unrecognized option 'BOGUS'"),
		do("CLIENT", "NOPE").fails("ERR unknown subcommand 'NOPE'. Try CLIENT HELP."),
		do("CONFIG", "GET", "save").is(map[any]any{"save": ""}),
		do("CONFIG", "GET", "appendonly").is(map[any]any{"appendonly": "no"}),
		do("CONFIG", "GET", "maxmemory*").is(map[any]any{"maxmemory": "0", "maxmemory-policy": "allkeys-lru", "maxmemory-samples": "5"}),
		do("FOOBAR", "a", "b").fails("ERR unknown command 'FOOBAR', with args beginning with: 'a' 'b' "),
		do("GET").fails("ERR wrong number of arguments for 'get' command"),
		do("AUTH", "pw").fails("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"),
		do("AUTH", "ns", "pw").fails("WRONGPASS invalid username-password pair or user is disabled."),
		do("HELLO", "4").fails("NOPROTO unsupported protocol version"),
		do("DBSIZE").is(0),
		do("CACHE", "NOPE").fails("ERR unknown subcommand 'NOPE'. Try CACHE HOTKEYS, CACHE SAMPLES or CACHE MIGRATIONS."),
		do("CACHE", "MIGRATIONS").is([]any{}),
		do("CACHE", "SAMPLES", "-1").fails("ERR count must be a non-negative integer"),
		do("CACHE", "SAMPLES", "1", "2").fails("ERR wrong number of arguments for 'cache|samples' command"),
	})
	id, err := c.ClientID(ctx(t)).Result()
	if err != nil || id <= 0 {
		t.Fatalf("CLIENT ID = %d, %v", id, err)
	}
	tm, err := c.Time(ctx(t)).Result()
	if err != nil || !tm.Equal(n.clock.Now()) {
		t.Fatalf("TIME = %v, %v; want the injected clock %v", tm, err, n.clock.Now())
	}
	// HELLO 2 switches the connection to RESP2: maps become flat arrays.
	conn := c.Conn()
	defer conn.Close()
	hello, err := conn.Do(ctx(t), "HELLO", "3").Result()
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := hello.(map[any]any); !ok || m["proto"] != int64(3) || m["server"] != "redis" {
		t.Fatalf("HELLO 3 = %#v", hello)
	}
	// COMMAND: go-redis parses the Redis 7 reply, key positions included.
	cmds, err := c.Command(ctx(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][3]int8{"get": {1, 1, 1}, "mset": {1, -1, 2}, "rename": {1, 2, 1}, "ping": {0, 0, 0}} {
		ci := cmds[name]
		if ci == nil {
			t.Fatalf("COMMAND lacks %s", name)
		}
		if ci.FirstKeyPos != want[0] || ci.LastKeyPos != want[1] || ci.StepCount != want[2] {
			t.Errorf("COMMAND %s keys = %d,%d,%d; want %v", name, ci.FirstKeyPos, ci.LastKeyPos, ci.StepCount, want)
		}
	}
	if !contains(cmds["set"].Flags, "denyoom") || !contains(cmds["get"].Flags, "readonly") {
		t.Errorf("COMMAND flags: set %v, get %v", cmds["set"].Flags, cmds["get"].Flags)
	}
	count, _ := c.Do(ctx(t), "COMMAND", "COUNT").Int64()
	if int(count) != len(cmds) {
		t.Errorf("COMMAND COUNT = %d, COMMAND lists %d", count, len(cmds))
	}
	info, err := c.Do(ctx(t), "COMMAND", "INFO", "get", "nosuch").Slice()
	if err != nil || len(info) != 2 || info[1] != nil {
		t.Fatalf("COMMAND INFO get nosuch = %#v, %v", info, err)
	}
	ks := info[0].([]any)[8].([]any)[0].(map[any]any)
	bs := ks["begin_search"].(map[any]any)["spec"].(map[any]any)
	fk := ks["find_keys"].(map[any]any)["spec"].(map[any]any)
	if bs["index"] != int64(1) || fk["lastkey"] != int64(0) || fk["keystep"] != int64(1) {
		t.Errorf("GET key spec = %#v", ks)
	}
	docs, err := c.Do(ctx(t), "COMMAND", "DOCS", "set").Result()
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := docs.(map[any]any)["set"].(map[any]any); !ok || d["group"] != "string" {
		t.Fatalf("COMMAND DOCS set = %#v", docs)
	}
	keys, err := c.CommandGetKeys(ctx(t), "MSET", "a", "1", "b", "2").Result()
	if err != nil || !(len(keys) == 2 && keys[0] == "a" && keys[1] == "b") {
		t.Fatalf("COMMAND GETKEYS = %v, %v", keys, err)
	}
	c.Set(ctx(t), "x", "1", time.Minute)
	infoText, err := c.Info(ctx(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Server", "redis_version:", "# Clients", "connected_clients:", "# Memory", "used_memory:",
		"# Stats", "keyspace_hits:", "# Keyspace", "db0:keys=1,expires=1"} {
		if !containsStr(infoText, want) {
			t.Errorf("INFO lacks %q", want)
		}
	}
	mem, _ := c.Info(ctx(t), "memory").Result()
	if containsStr(mem, "# Server") || !containsStr(mem, "# Memory") {
		t.Errorf("INFO memory = %q", mem)
	}
	// QUIT answers OK and closes the connection.
	q := n.client(t, func(o *redis.Options) { o.PoolSize = 1 })
	if err := q.Do(ctx(t), "QUIT").Err(); err != nil {
		t.Fatalf("QUIT: %v", err)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func containsStr(s, sub string) bool { return len(s) >= len(sub) && stringsIndex(s, sub) >= 0 }
