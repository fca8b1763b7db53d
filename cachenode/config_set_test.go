package cachenode_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestConfigSetLive: CONFIG SET changes what it names at once: maxmemory
// (node-wide, default namespace only) and a namespace's own
// maxmemory-policy; timeout closes idle clients but not blocked ones.
func TestConfigSetLive(t *testing.T) {
	n := startNode(t, withNamespaces(t, "namespaces:\n  tenant: {secret: pw}\n"))
	c := n.client(t)
	tenant := n.client(t, func(o *redis.Options) { o.Username, o.Password = "tenant", "pw" })
	run(t, c, []step{
		do("CONFIG", "SET", "maxmemory", "1mb", "maxmemory-policy", "noeviction").is("OK"),
		do("CONFIG", "GET", "maxmemory").is(map[any]any{"maxmemory": "1048576"}),
		do("CONFIG", "GET", "maxmemory-policy").is(map[any]any{"maxmemory-policy": "noeviction"}),
		do("CONFIG", "SET", "maxmemory", "1mb", "maxmemory-policy", "volatile-lru").
			fails("ERR CONFIG SET failed (possibly related to argument 'maxmemory-policy') - argument(s) must be one of the following: allkeys-lru, allkeys-lfu, volatile-ttl, noeviction"),
	})
	if !strings.Contains(c.Info(ctx(t), "memory").Val(), "maxmemory:1048576\r\n") {
		t.Fatal("INFO memory does not show the new maxmemory")
	}
	big := strings.Repeat("x", 100<<10)
	var err error
	for i := 0; i < 20 && err == nil; i++ {
		err = c.Set(ctx(t), "big"+string(rune('a'+i)), big, 0).Err()
	}
	if err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("2 MB into a 1 MB node under noeviction: %v", err)
	}
	// A tenant may not change the node, only its own namespace's policy.
	run(t, tenant, []step{
		do("CONFIG", "SET", "maxmemory", "0").fails("ERR CONFIG SET failed (possibly related to argument 'maxmemory') - a node-wide setting: only a connection in the default namespace may change it"),
		do("CONFIG", "SET", "maxmemory-policy", "allkeys-lfu").is("OK"),
		do("CONFIG", "GET", "maxmemory-policy").is(map[any]any{"maxmemory-policy": "allkeys-lfu"}),
	})
	run(t, c, []step{
		do("CONFIG", "GET", "maxmemory-policy").is(map[any]any{"maxmemory-policy": "noeviction"}),
		do("CONFIG", "SET", "maxmemory", "0", "maxmemory-policy", "allkeys-lru", "maxmemory-samples", "7").is("OK"),
		do("CONFIG", "GET", "maxmemory-samples").is(map[any]any{"maxmemory-samples": "7"}),
	})
	if err := c.Set(ctx(t), "after", big, 0).Err(); err != nil {
		t.Fatalf("after maxmemory 0: %v", err)
	}

	// timeout: an idle client is closed after about that long; a blocked
	// one waits on.
	blocked := dialRaw(t, n.addrs.RESP)
	blocked.send(t, "BLPOP", "never", "0")
	waitBlockedClients(t, c, 1)
	idle := dialRaw(t, n.addrs.RESP)
	idle.do(t, "PING")
	start := time.Now()
	run(t, c, []step{do("CONFIG", "SET", "timeout", "1").is("OK")})
	idle.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := idle.r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle client: %v, want it closed", err)
	}
	if took := time.Since(start); took < time.Second || took > 3*time.Second {
		t.Fatalf("idle client closed after %v with timeout 1", took)
	}
	run(t, c, []step{do("CONFIG", "SET", "timeout", "0").is("OK")})
	if got := blockedClients(t, c); got != 1 {
		t.Fatalf("blocked_clients = %d: the timeout closed a blocked client", got)
	}
	c.RPush(ctx(t), "never", "v")
	if got := blocked.read(t, 5*time.Second); got != bulkPair("never", "v") {
		t.Fatalf("blocked client got %q", got)
	}
}
