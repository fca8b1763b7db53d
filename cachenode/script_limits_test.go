package cachenode_test

import (
	"crypto/sha1"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/cachenode"
)

// infoField reads one field of INFO.
func infoField(t *testing.T, c *redis.Client, name string) string {
	t.Helper()
	info, err := c.Info(ctx(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			return v
		}
	}
	t.Fatalf("INFO has no %s", name)
	return ""
}

// TestScriptCacheBounded: scripts EVAL cached are kept in an LRU per
// namespace (3 here; Redis 7.4 keeps 500) and the least recently used is
// evicted, counted in INFO evicted_scripts and in
// portico_cachenode_scripts_evicted_total; EVALSHA marks a script used;
// SCRIPT LOAD's scripts are never evicted, and a SCRIPT LOAD that would
// pass the namespace's byte bound with nothing evictable left is refused.
func TestScriptCacheBounded(t *testing.T) {
	n := startNode(t, withConfig(func(c *cachenode.Config) {
		c.ScriptCacheEvalMax = 3
		c.ScriptCacheBytes = 400
	}))
	c := n.client(t)
	loaded, err := c.ScriptLoad(ctx(t), "return 'loaded'").Result()
	if err != nil {
		t.Fatal(err)
	}
	shas := make([]string, 7)
	eval := func(i int) {
		t.Helper()
		src := fmt.Sprintf("return %d", i)
		if got, err := c.Eval(ctx(t), src, nil).Int(); err != nil || got != i {
			t.Fatalf("EVAL %q = %d, %v", src, got, err)
		}
		shas[i] = fmt.Sprintf("%x", sha1Sum(src))
	}
	for i := 1; i <= 5; i++ {
		eval(i)
	}
	exists := func(shas ...string) []bool {
		t.Helper()
		got, err := c.ScriptExists(ctx(t), shas...).Result()
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := fmt.Sprint(exists(loaded, shas[1], shas[2], shas[3], shas[4], shas[5])); got != "[true false false true true true]" {
		t.Fatalf("SCRIPT EXISTS loaded, 1..5 = %s: want the loaded script and the 3 most recent", got)
	}
	if got := infoField(t, c, "evicted_scripts"); got != "2" {
		t.Fatalf("evicted_scripts = %s", got)
	}
	// EVALSHA of 3 makes 4 the least recently used.
	if err := c.EvalSha(ctx(t), shas[3], nil).Err(); err != nil {
		t.Fatal(err)
	}
	eval(6)
	if got := fmt.Sprint(exists(shas[3], shas[4], shas[5], shas[6])); got != "[true false true true]" {
		t.Fatalf("SCRIPT EXISTS 3..6 = %s: want 4 evicted", got)
	}
	if err := c.EvalSha(ctx(t), shas[4], nil).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") {
		t.Fatalf("EVALSHA of an evicted script: %v", err)
	}
	if got := infoField(t, c, "number_of_cached_scripts"); got != "4" {
		t.Fatalf("number_of_cached_scripts = %s", got)
	}
	// Bytes: loading a 300-byte script evicts EVAL scripts to make room;
	// another load past 400 bytes is refused, and changes nothing.
	big := "return '" + strings.Repeat("b", 290) + "'"
	if err := c.ScriptLoad(ctx(t), big).Err(); err != nil {
		t.Fatalf("SCRIPT LOAD of a script that fits after evictions: %v", err)
	}
	if err := c.ScriptLoad(ctx(t), "return '"+strings.Repeat("c", 90)+"'").Err(); err == nil || !strings.Contains(err.Error(), "script cache of this namespace is full") {
		t.Fatalf("SCRIPT LOAD past the byte bound: %v", err)
	}
	if got := fmt.Sprint(exists(loaded, fmt.Sprintf("%x", sha1Sum(big)))); got != "[true true]" {
		t.Fatalf("loaded scripts after the refusal: %s", got)
	}
	// An EVAL still runs (and is cached while it fits, evicted when not).
	eval(6)
	resp, err := http.Get("http://" + n.addrs.HTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	ev := infoField(t, c, "evicted_scripts")
	if !strings.Contains(string(body), "portico_cachenode_scripts_evicted_total "+ev+"\n") || !strings.Contains(string(body), "portico_cachenode_scripts_cached ") {
		t.Fatalf("/metrics lacks the script cache metrics (evicted_scripts %s)", ev)
	}
	if err := c.ScriptFlush(ctx(t)).Err(); err != nil {
		t.Fatal(err)
	}
	if got := infoField(t, c, "number_of_cached_scripts"); got != "0" {
		t.Fatalf("number_of_cached_scripts after SCRIPT FLUSH = %s", got)
	}
}

// TestScriptMemoryLimit: a script that allocates without end is stopped
// with a clear error instead of growing the node until it is killed; a
// string.rep past the limit fails before it allocates (and pcall catches
// it, as Lua's own out-of-memory error); the node serves on, and scripts
// run again.
func TestScriptMemoryLimit(t *testing.T) {
	n := startNode(t, withConfig(func(c *cachenode.Config) { c.ScriptMaxMemory = 16 << 20 }))
	c := n.client(t, func(o *redis.Options) { o.ReadTimeout = 30 * time.Second })
	err := c.Eval(ctx(t), "local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 4096) .. i end return #t", nil).Err()
	if err == nil || !strings.Contains(err.Error(), "the script's memory grew past the limit of 16777216 bytes") {
		t.Fatalf("runaway table: %v", err)
	}
	err = c.Eval(ctx(t), "return string.rep('x', 1e12)", nil).Err()
	if err == nil || !strings.Contains(err.Error(), "string.rep of 1000000000000 x 1 bytes is over the script memory limit of 16777216 bytes") {
		t.Fatalf("string.rep: %v", err)
	}
	if got, err := c.Eval(ctx(t), "local ok = pcall(function() return ('ab'):rep(1e10) end) return ok and 1 or 0", nil).Int(); err != nil || got != 0 {
		t.Fatalf("pcall of a string.rep past the limit = %d, %v", got, err)
	}
	if got, err := c.Eval(ctx(t), "return #string.rep('x', 1000)", nil).Int(); err != nil || got != 1000 {
		t.Fatalf("a small string.rep = %d, %v", got, err)
	}
	if err := c.Ping(ctx(t)).Err(); err != nil {
		t.Fatal(err)
	}
}

func sha1Sum(s string) [20]byte { return sha1.Sum([]byte(s)) }
