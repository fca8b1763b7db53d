package cachenode_test

import (
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// conformanceScript is run against cachenode and against a private Debian
// redis-server; every reply (value or error string) must be the same. It
// avoids what legitimately differs: randomness (SPOP, SRANDMEMBER),
// millisecond TTLs, server introspection, Redis 7.2+/8 and Portico
// additions (CLIENT SETINFO, IFEQ, CAS), SELECT of databases other than 0,
// and INCRBYFLOAT results whose last digits depend on Redis's long double.
var conformanceScript = [][]any{
	{"SET", "s", "v"}, {"GET", "s"}, {"SET", "s", "w", "NX"}, {"SET", "s", "w", "XX"}, {"SET", "nx", "w", "XX"},
	{"SET", "s", "x", "GET"}, {"SET", "new", "x", "NX", "GET"}, {"SET", "s", "y", "EX", "100"}, {"TTL", "s"},
	{"SET", "s", "z", "KEEPTTL"}, {"TTL", "s"}, {"SET", "s", "v", "EX", "0"}, {"SET", "s", "v", "EX", "-5"},
	{"SET", "s", "v", "EX", "abc"}, {"SET", "s", "v", "NX", "XX"}, {"SET", "s", "v", "EX", "1", "PX", "1"},
	{"SET", "s", "v", "KEEPTTL", "EX", "1"}, {"SET", "s", "v", "BOGUS"}, {"SET", "s"}, {"SET", "s", "v", "PX", "9223372036854775807"},
	{"SETNX", "k1", "a"}, {"SETNX", "k1", "b"}, {"SETEX", "k2", "7", "a"}, {"TTL", "k2"}, {"SETEX", "k2", "0", "a"},
	{"SETEX", "k2", "x", "a"}, {"PSETEX", "k3", "-1", "a"}, {"GETDEL", "k1"}, {"GETDEL", "k1"}, {"SET", "k4", "v"},
	{"GETEX", "k4", "EX", "50"}, {"TTL", "k4"}, {"GETEX", "k4", "PERSIST"}, {"TTL", "k4"}, {"GETEX", "k4", "PX", "10", "EX", "1"},
	{"GETEX", "k4", "EX", "0"}, {"GETEX", "missing"}, {"GETEX", "k4", "BOGUS"},
	{"MSET", "m1", "1", "m2", "2"}, {"MSET", "m1", "1", "m2"}, {"MGET", "m1", "nope", "m2"}, {"MSETNX", "m3", "3", "m1", "x"},
	{"MSETNX", "m3", "3", "m4", "4"}, {"APPEND", "ap", "foo"}, {"APPEND", "ap", "bar"}, {"STRLEN", "ap"}, {"STRLEN", "nope"},
	{"INCR", "n"}, {"INCRBY", "n", "10"}, {"DECR", "n"}, {"DECRBY", "n", "4"}, {"INCRBY", "n", "x"}, {"INCRBY", "n", " 1"},
	{"SET", "big", "9223372036854775807"}, {"INCR", "big"}, {"DECRBY", "n", "-9223372036854775808"},
	{"SET", "f", "01"}, {"INCR", "f"}, {"SET", "f", "+1"}, {"INCR", "f"}, {"SET", "f", "10.5"}, {"INCRBYFLOAT", "f", "0.1"},
	{"INCRBYFLOAT", "f", "-5"}, {"INCRBYFLOAT", "f", "abc"}, {"INCRBYFLOAT", "fnew", "3"},
	{"LPUSH", "list", "a"}, {"GET", "list"}, {"INCR", "list"}, {"APPEND", "list", "x"}, {"SET", "list", "x", "GET"},
	{"STRLEN", "list"}, {"GETDEL", "list"}, {"SET", "list", "now-a-string"}, {"TYPE", "list"}, {"MGET", "list", "m1"},
	// keys
	{"MSET", "a", "1", "b", "2", "c", "3"}, {"EXISTS", "a", "b", "zz", "a"}, {"DEL", "a", "zz"}, {"UNLINK", "b", "c"},
	{"SET", "k", "v"}, {"EXPIRE", "k", "100"}, {"TTL", "k"}, {"EXPIRE", "k", "50", "GT"}, {"EXPIRE", "k", "500", "GT"},
	{"EXPIRE", "k", "50", "LT"}, {"EXPIRE", "k", "60", "NX"}, {"EXPIRE", "k", "60", "XX"}, {"EXPIRE", "k", "60", "NX", "XX"},
	{"EXPIRE", "k", "60", "GT", "LT"}, {"EXPIRE", "k", "x"}, {"EXPIRE", "k", "1", "BOGUS"}, {"PERSIST", "k"}, {"PERSIST", "k"},
	{"TTL", "k"}, {"TTL", "missing"}, {"PTTL", "missing"}, {"EXPIRE", "missing", "10"}, {"EXPIRE", "k", "-1"}, {"EXISTS", "k"},
	{"TYPE", "missing"}, {"SET", "src", "v", "EX", "100"}, {"RENAME", "src", "dst"}, {"GET", "dst"}, {"TTL", "dst"},
	{"RENAME", "src", "dst"}, {"RENAME", "dst", "dst"}, {"EXPIRE", "dst", "9223372036854775807"},
	// lists
	{"RPUSH", "l", "a", "b", "c"}, {"LPUSH", "l", "z", "y"}, {"LRANGE", "l", "0", "-1"}, {"LRANGE", "l", "-2", "100"},
	{"LRANGE", "l", "3", "1"}, {"LRANGE", "nope", "0", "-1"}, {"LRANGE", "l", "a", "1"}, {"LINDEX", "l", "0"}, {"LINDEX", "l", "-1"},
	{"LINDEX", "l", "99"}, {"LINDEX", "l", "x"}, {"LLEN", "l"}, {"LPOP", "l"}, {"RPOP", "l"}, {"LPOP", "l", "2"}, {"RPOP", "l", "5"},
	{"EXISTS", "l"}, {"LPOP", "l"}, {"LPOP", "l", "2"}, {"LPOP", "l", "-1"}, {"LPOP", "l", "x"}, {"LPOP", "l", "1", "2"},
	{"RPUSH", "r", "a", "b", "a", "c", "a"}, {"LREM", "r", "-2", "a"}, {"LRANGE", "r", "0", "-1"}, {"LREM", "r", "0", "a"},
	{"LREM", "r", "x", "a"}, {"RPUSH", "t", "1", "2", "3", "4", "5"}, {"LTRIM", "t", "1", "-2"}, {"LRANGE", "t", "0", "-1"},
	{"LTRIM", "t", "5", "10"}, {"EXISTS", "t"}, {"LPUSH", "s", "a"}, {"LLEN", "s"}, {"LPUSH", "x"},
	// sets
	{"SADD", "s1", "a", "b", "c", "a"}, {"SADD", "s2", "b", "c", "d"}, {"SCARD", "s1"}, {"SISMEMBER", "s1", "a"},
	{"SISMEMBER", "s1", "z"}, {"SMISMEMBER", "s1", "a", "z"}, {"SMEMBERS", "s1"}, {"SINTER", "s1", "s2"}, {"SINTER", "s1", "nope"},
	{"SUNION", "s1", "s2"}, {"SDIFF", "s1", "s2"}, {"SDIFF", "nope", "s1"}, {"SREM", "s1", "a", "z"}, {"SRANDMEMBER", "nope"},
	{"SPOP", "nope"}, {"SPOP", "nope", "3"}, {"SRANDMEMBER", "nope", "3"}, {"SADD", "s", "a"}, {"SINTER", "s1", "s"},
	{"SPOP", "s1", "-1"}, {"SPOP", "s1", "0"}, {"SRANDMEMBER", "s1", "0"}, {"SADD", "one", "x"}, {"SPOP", "one", "5"}, {"EXISTS", "one"},
	// hashes
	{"HSET", "h", "a", "1", "b", "2"}, {"HSET", "h", "a", "9", "c", "3"}, {"HSET", "h", "a"}, {"HGET", "h", "a"}, {"HGET", "h", "zz"},
	{"HMGET", "h", "a", "zz", "c"}, {"HLEN", "h"}, {"HEXISTS", "h", "b"}, {"HEXISTS", "h", "zz"}, {"HKEYS", "h"}, {"HVALS", "h"},
	{"HGETALL", "h"}, {"HINCRBY", "h", "a", "5"}, {"HINCRBY", "h", "new", "-2"}, {"HINCRBY", "h", "a", "x"}, {"HSET", "h", "s", "abc"},
	{"HINCRBY", "h", "s", "1"}, {"HSET", "h", "max", "9223372036854775807"}, {"HINCRBY", "h", "max", "1"}, {"HMSET", "h", "q", "1"},
	{"HDEL", "h", "a", "b", "zz"}, {"HGET", "s", "a"}, {"HGETALL", "nope"},
	// connection and server
	{"PING"}, {"PING", "hi"}, {"PING", "a", "b"}, {"ECHO", "x y"}, {"SELECT", "0"}, {"SELECT", "x"},
	{"CLIENT", "SETNAME", "worker-1"}, {"CLIENT", "GETNAME"}, {"CLIENT", "SETNAME", "bad name"}, {"CONFIG", "GET", "save"}, {"CONFIG", "GET", "appendonly"},
	{"FOOBAR", "a", "b"}, {"GET"}, {"AUTH", "pw"}, {"AUTH", "ns", "pw"}, {"HELLO", "4"}, {"HELLO", "x"}, {"DBSIZE"},
	{"COMMAND", "GETKEYS", "MSET", "a", "1", "b", "2"}, {"COMMAND", "GETKEYS", "PING"}, {"COMMAND", "GETKEYS", "NOSUCH"},
	// patterns, type changes, odd arguments
	{"MSET", "user:1", "a", "user:2", "b", "user:10", "c", "x*y", "d", "h[ae]llo", "e"}, {"KEYS", "user:?"}, {"KEYS", "user:*"},
	{"KEYS", "user:[1]*"}, {"KEYS", "user:[^1]"}, {"KEYS", "x\\*y"}, {"KEYS", "h[ae]llo"}, {"KEYS", "nomatch*"},
	{"SCAN", "x"}, {"SCAN", "0", "COUNT", "0"}, {"SCAN", "0", "COUNT"},
	{"EXPIREAT", "user:1", "1"}, {"EXISTS", "user:1"}, {"PEXPIRE", "user:2", "0"}, {"EXISTS", "user:2"},
	{"SET", "e", ""}, {"GET", "e"}, {"STRLEN", "e"}, {"APPEND", "e", ""}, {"INCRBY", "e", "1"},
	{"LPUSH", "lst", "a"}, {"RENAME", "lst", "user:10"}, {"TYPE", "user:10"}, {"LRANGE", "user:10", "0", "-1"},
	{"SET", "num", "10"}, {"INCRBYFLOAT", "num", "2.5"}, {"INCR", "num"}, {"INCRBYFLOAT", "num", "-12.5"}, {"GET", "num"},
	{"HSET", "hh", "f", "v"}, {"LPUSH", "hh", "x"}, {"SADD", "hh", "x"}, {"SCARD", "hh"}, {"HLEN", "s1"},
	{"RPUSH", "big", "x"}, {"LTRIM", "nosuch", "0", "1"}, {"LREM", "nosuch", "0", "a"}, {"LINDEX", "nosuch", "0"},
	{"SMISMEMBER", "nosuch", "a"}, {"HMGET", "nosuch", "a", "b"}, {"HDEL", "nosuch", "a"}, {"SREM", "nosuch", "a"},
	{"EXISTS"}, {"DEL"}, {"MGET"}, {"ECHO"}, {"TYPE", "a", "b"}, {"ping"}, {"pInG", "x"}, {"get", "num"},
	{"SET", "k", "v", "PXAT", "1"}, {"EXISTS", "k"}, {"SET", "k", "v", "EXAT", "99999999999999999"},
	{"MSETNX", "a"}, {"HINCRBY", "h2", "f", "9223372036854775807"}, {"HINCRBY", "h2", "f", "1"}, {"HGET", "h2", "f"},
	// cluster commands on a node not in cluster mode
	{"CLUSTER", "INFO"}, {"CLUSTER", "KEYSLOT", "a"}, {"CLUSTER"}, {"CLUSTER", "BOGUS"}, {"CLUSTER", "KEYSLOT"},
	{"READONLY"}, {"READWRITE"}, {"ASKING"}, {"CONFIG", "GET", "cluster-enabled"},
	{"FLUSHDB", "BOGUS"}, {"FLUSHDB"}, {"DBSIZE"},
	// CLIENT KILL, UNBLOCK and LIST where no other client is involved
	{"CLIENT", "KILL", "1.2.3.4:5"}, {"CLIENT", "KILL", "ID", "999999"}, {"CLIENT", "KILL", "ID", "0"}, {"CLIENT", "KILL", "ID", "x"},
	{"CLIENT", "KILL", "TYPE", "bogus"}, {"CLIENT", "KILL", "TYPE", "master"}, {"CLIENT", "KILL", "TYPE", "pubsub", "SKIPME", "no"},
	{"CLIENT", "KILL", "ADDR", "1.2.3.4:5"}, {"CLIENT", "KILL", "LADDR", "1.2.3.4:5", "ID", "3"}, {"CLIENT", "KILL", "SKIPME", "maybe"},
	{"CLIENT", "KILL", "USER", "nosuchuser"}, {"CLIENT", "KILL", "BOGUS", "x"}, {"CLIENT", "KILL", "ID", "1", "TYPE"}, {"CLIENT", "KILL"},
	{"CLIENT", "UNBLOCK", "999999"}, {"CLIENT", "UNBLOCK", "x"}, {"CLIENT", "UNBLOCK", "1", "BOGUS"}, {"CLIENT", "UNBLOCK", "1", "ERROR"},
	{"CLIENT", "UNBLOCK"}, {"CLIENT", "UNBLOCK", "1", "2", "3"}, {"CLIENT", "LIST", "TYPE", "bogus"}, {"CLIENT", "LIST", "TYPE", "master"},
	{"CLIENT", "LIST", "TYPE", "replica"}, {"CLIENT", "LIST", "ID", "abc"}, {"CLIENT", "LIST", "ID", "999999"}, {"CLIENT", "LIST", "BOGUS"},
	{"CLIENT", "LIST", "TYPE"},
}

// unordered commands: replies compared as sorted lists.
var unordered = map[string]bool{"SMEMBERS": true, "SINTER": true, "SUNION": true, "SDIFF": true, "HKEYS": true, "HVALS": true, "KEYS": true}

// TestConformanceWithRedisServer runs conformanceScript against cachenode
// and redis-server and requires identical replies, in RESP2 and RESP3.
func TestConformanceWithRedisServer(t *testing.T) {
	conformance(t, conformanceScript, unordered, 2, 3)
}

// conformance runs script against a fresh cachenode and a private
// redis-server, once per RESP protocol version given (2, 3), each on a
// flushed keyspace, and requires identical replies (values and error
// strings). Replies of the commands in unorderedCmds are compared as
// sorted lists.
func conformance(t *testing.T, script [][]any, unorderedCmds map[string]bool, protocols ...int) {
	t.Helper()
	n := startNode(t)
	port := startRedisServer(t)
	// Our clock is injected; keep it at the wall clock so absolute times agree.
	n.clock.ms.Store(time.Now().UnixMilli())
	for _, proto := range protocols {
		opts := func(addr string) *redis.Options {
			return &redis.Options{Addr: addr, Protocol: proto, MaxRetries: -1, PoolSize: 1, DisableIdentity: true}
		}
		ours, theirs := redis.NewClient(opts(n.addrs.RESP)), redis.NewClient(opts("127.0.0.1:"+port))
		for _, c := range []*redis.Client{ours, theirs} {
			if err := c.FlushAll(ctx(t)).Err(); err != nil {
				t.Fatal(err)
			}
		}
		reply := func(c *redis.Client, args []any) string {
			v, err := c.Do(ctx(t), args...).Result()
			if errors.Is(err, redis.Nil) {
				return "(nil)"
			}
			if err != nil {
				return "error: " + err.Error()
			}
			if s, ok := v.([]any); ok && unorderedCmds[strings.ToUpper(fmt.Sprint(args[0]))] {
				ss := make([]string, len(s))
				for i, e := range s {
					ss[i] = fmt.Sprint(e)
				}
				sort.Strings(ss)
				return fmt.Sprint(ss)
			}
			return fmt.Sprintf("%#v", normMap(v))
		}
		mismatches := 0
		for _, args := range script {
			a, b := reply(ours, args), reply(theirs, args)
			if a != b {
				mismatches++
				t.Errorf("RESP%d %v:\n  cachenode:    %s\n  redis-server: %s", proto, args, a, b)
			}
		}
		ours.Close()
		theirs.Close()
		t.Logf("RESP%d: %d commands compared with redis-server, %d mismatches", proto, len(script), mismatches)
	}
}

// startRedisServer starts a private redis-server (no persistence) on a
// free loopback port, stopped when t ends, and returns the port.
func startRedisServer(t *testing.T) string {
	t.Helper()
	rs := needTool(t, "redis-server")
	port := freePort(t)
	srv := exec.Command(rs, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "no",
		"--dir", t.TempDir(), "--daemonize", "no", "--loglevel", "warning")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	waitPing(t, "127.0.0.1:"+port)
	return port
}

// normMap renders maps with sorted keys so they compare as text.
func normMap(v any) any {
	m, ok := v.(map[any]any)
	if !ok {
		return v
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, fmt.Sprint(k))
	}
	sort.Strings(keys)
	out := make([]string, 0, len(m))
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%s=%v", k, m[k]))
	}
	return out
}
