package cachenode_test

import (
	"testing"
	"time"
)

// TestDumpRestore: DUMP/RESTORE through a real node and go-redis, with
// Redis's replies for every option and error.
func TestDumpRestore(t *testing.T) {
	n := startNode(t)
	c := n.client(t)
	cx := ctx(t)
	run(t, c, []step{
		do("RPUSH", "l", "a", "b", "c").is(3),
		do("HSET", "h", "f", "v").is(1),
		do("SADD", "s", "x", "y").is(2),
		do("SET", "str", "").is("OK"),
		do("DUMP", "missing").is(nil),
	})
	payload := map[string]string{}
	for _, k := range []string{"l", "h", "s", "str"} {
		p, err := c.Dump(cx, k).Result()
		if err != nil {
			t.Fatalf("DUMP %s: %v", k, err)
		}
		payload[k] = p
	}
	bad := []byte(payload["l"])
	bad[len(bad)-1] ^= 1
	run(t, c, []step{
		do("RESTORE", "l", "0", payload["l"]).fails("BUSYKEY Target key name already exists."),
		do("RESTORE", "l2", "-1", payload["l"]).fails("ERR Invalid TTL value, must be >= 0"),
		do("RESTORE", "l2", "x", payload["l"]).fails("ERR value is not an integer or out of range"),
		do("RESTORE", "l2", "0", string(bad)).fails("ERR DUMP payload version or checksum are wrong"),
		do("RESTORE", "l2", "0", "short").fails("ERR DUMP payload version or checksum are wrong"),
		do("RESTORE", "l2", "0", payload["l"], "BOGUS").fails("ERR syntax error"),
		do("RESTORE", "l2", "0", payload["l"], "IDLETIME", "-1").fails("ERR Invalid IDLETIME value, must be >= 0"),
		do("RESTORE", "l2", "0", payload["l"], "FREQ", "256").fails("ERR Invalid FREQ value, must be >= 0 and <= 255"),
		do("RESTORE", "l2", "0", payload["l"], "IDLETIME", "1", "FREQ", "1").fails("ERR syntax error"),
		do("RESTORE", "l2", "0", payload["l"], "IDLETIME", "10").is("OK"),
		do("LRANGE", "l2", "0", "-1").is([]any{"a", "b", "c"}),
		do("TTL", "l2").is(-1),
		do("RESTORE", "h2", "5000", payload["h"]).is("OK"),
		do("PTTL", "h2").is(5000),
		do("HGETALL", "h2").is(map[any]any{"f": "v"}),
		do("RESTORE", "s2", n.clock.At(7*time.Second), payload["s"], "ABSTTL").is("OK"),
		do("PTTL", "s2").is(7000),
		do("SCARD", "s2").is(2),
		do("SMISMEMBER", "s2", "x", "y").is([]any{int64(1), int64(1)}),
		do("RESTORE", "str", "0", payload["l"], "REPLACE").is("OK"),
		do("TYPE", "str").is("list"),
		do("RESTORE", "e", "0", payload["str"]).is("OK"),
		do("GET", "e").is(""),
		// A deadline already past stores nothing; with REPLACE it deletes.
		do("RESTORE", "gone", n.clock.At(-time.Second), payload["str"], "ABSTTL").is("OK"),
		do("EXISTS", "gone").is(0),
		do("RESTORE", "l", n.clock.At(-time.Second), payload["h"], "ABSTTL", "REPLACE").is("OK"),
		do("EXISTS", "l").is(0),
	})
}
