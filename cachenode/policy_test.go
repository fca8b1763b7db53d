package cachenode_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/cachenode"
)

func authed(ns, secret string) func(*redis.Options) {
	return func(o *redis.Options) { o.Username, o.Password = ns, secret; o.DisableIdentity = true }
}

var val100 = strings.Repeat("v", 100)

func TestExpiryLazy(t *testing.T) {
	n := startNode(t)
	c := n.client(t)
	c.Set(ctx(t), "k", "v", 1500*time.Millisecond)
	n.clock.Advance(1499 * time.Millisecond)
	if v, err := c.Get(ctx(t), "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET before deadline = %q, %v", v, err)
	}
	n.clock.Advance(time.Millisecond)
	if err := c.Get(ctx(t), "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET at deadline: err = %v, want nil reply", err)
	}
	for _, cmd := range []string{"EXISTS", "TTL", "TYPE", "STRLEN"} {
		c.Set(ctx(t), "k", "v", time.Second)
		n.clock.Advance(time.Second)
		got, _ := c.Do(ctx(t), cmd, "k").Result()
		want := map[string]any{"EXISTS": int64(0), "TTL": int64(-2), "TYPE": "none", "STRLEN": int64(0)}[cmd]
		if got != want {
			t.Errorf("%s on an expired key = %v, want %v", cmd, got, want)
		}
	}
	info, _ := c.Info(ctx(t), "stats").Result()
	if !strings.Contains(info, "expired_keys:5") {
		t.Errorf("INFO stats after 5 lazy expiries:\n%s", info)
	}
}

func TestExpiryActive(t *testing.T) {
	n := startNode(t)
	c := n.client(t)
	pipe := c.Pipeline()
	for i := range 500 {
		pipe.Set(ctx(t), fmt.Sprintf("ttl:%d", i), "v", 10*time.Second)
	}
	for i := range 100 {
		pipe.Set(ctx(t), fmt.Sprintf("keep:%d", i), "v", 0)
	}
	if _, err := pipe.Exec(ctx(t)); err != nil {
		t.Fatal(err)
	}
	n.clock.Advance(11 * time.Second)
	// No key is read: only the active cycle can reclaim them. Each cycle
	// signals; DBSIZE counts keys not yet reclaimed.
	deadline := time.After(15 * time.Second)
	for {
		select {
		case <-n.cycles:
		case <-deadline:
			t.Fatalf("active expiry did not reclaim: DBSIZE %d", c.DBSize(ctx(t)).Val())
		}
		if c.DBSize(ctx(t)).Val() == 100 {
			break
		}
	}
	info, _ := c.Info(ctx(t), "stats").Result()
	if !strings.Contains(info, "expired_keys:500") {
		t.Errorf("INFO stats: want expired_keys:500\n%s", info)
	}
}

// fill writes count keys of 100-byte values named prefix:i, advancing the
// clock by tick after every 100 keys.
func fill(t *testing.T, n *node, c *redis.Client, prefix string, count int, ttl func(i int) time.Duration, tick time.Duration) (oom int) {
	t.Helper()
	for i := range count {
		var d time.Duration
		if ttl != nil {
			d = ttl(i)
		}
		err := c.Set(ctx(t), fmt.Sprintf("%s:%d", prefix, i), val100, d).Err()
		if err != nil {
			if err.Error() != "OOM command not allowed when used memory > 'maxmemory'." {
				t.Fatalf("SET: %v", err)
			}
			oom++
		}
		if tick > 0 && i%100 == 99 {
			n.clock.Advance(tick)
		}
	}
	return oom
}

func surviving(t *testing.T, c *redis.Client, prefix string, from, to int) int {
	t.Helper()
	keys := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		keys = append(keys, fmt.Sprintf("%s:%d", prefix, i))
	}
	n, err := c.Exists(ctx(t), keys...).Result()
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

func memUsed(t *testing.T, c *redis.Client) (used, quota int) {
	info, err := c.Info(ctx(t), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		fmt.Sscanf(l, "namespace_used_memory:%d", &used)
		fmt.Sscanf(l, "namespace_maxmemory:%d", &quota)
	}
	return used, quota
}

const policiesYAML = `
namespaces:
  lru:   {secret: s, maxmemory: 200kb, policy: allkeys-lru}
  lfu:   {secret: s, maxmemory: 200kb, policy: allkeys-lfu}
  lru2:  {secret: s, maxmemory: 200kb, policy: allkeys-lru}
  vttl:  {secret: s, maxmemory: 200kb, policy: volatile-ttl}
  noev:  {secret: s, maxmemory: 100kb, policy: noeviction}
`

func TestEvictionAllKeysLRU(t *testing.T) {
	n := startNode(t, withNamespaces(t, policiesYAML))
	c := n.client(t, authed("lru", "s"))
	fill(t, n, c, "k", 900, nil, 0)
	n.clock.Advance(100 * time.Second)
	for i := range 400 { // read the first half: recently used
		c.Get(ctx(t), fmt.Sprintf("k:%d", i))
	}
	n.clock.Advance(100 * time.Second)
	fill(t, n, c, "new", 200, nil, 0)
	read, unread := surviving(t, c, "k", 0, 400), surviving(t, c, "k", 400, 900)
	t.Logf("allkeys-lru: read keys surviving %d/400, unread %d/500, new %d/200", read, unread, surviving(t, c, "new", 0, 200))
	if unread == 500 {
		t.Fatal("nothing was evicted; the quota did not bite")
	}
	if read < 390 || float64(read)/400-float64(unread)/500 < 0.1 {
		t.Errorf("LRU evicted recently read keys: %d/400 read kept vs %d/400 unread", read, unread)
	}
	if used, quota := memUsed(t, c); used > quota+1024 {
		t.Errorf("namespace uses %d bytes over a quota of %d", used, quota)
	}
}

// TestEvictionLFUKeepsHotSet: a hot set read often survives a scan of
// cold keys under allkeys-lfu, while the same workload under allkeys-lru
// loses most of it.
func TestEvictionLFUKeepsHotSet(t *testing.T) {
	n := startNode(t, withNamespaces(t, policiesYAML))
	hot := func(policy string) int {
		c := n.client(t, authed(policy, "s"))
		fill(t, n, c, "hot", 100, nil, 0)
		pipe := c.Pipeline()
		for range 100 { // enough reads to lift the logarithmic counter clear of one-hit keys
			for i := range 100 {
				pipe.Get(ctx(t), fmt.Sprintf("hot:%d", i))
			}
		}
		if _, err := pipe.Exec(ctx(t)); err != nil {
			t.Fatal(err)
		}
		n.clock.Advance(2 * time.Second)
		// The scan: each cold key is missed, filled and read once.
		for batch := range 30 {
			pipe := c.Pipeline()
			for i := batch * 100; i < (batch+1)*100; i++ {
				k := fmt.Sprintf("cold:%d", i)
				pipe.Get(ctx(t), k)
				pipe.Set(ctx(t), k, val100, 0)
				pipe.Get(ctx(t), k)
			}
			pipe.Exec(ctx(t)) // the first GETs answer nil
			n.clock.Advance(time.Second)
		}
		return surviving(t, c, "hot", 0, 100)
	}
	lfu := hot("lfu")
	lru := hot("lru2")
	t.Logf("hot keys surviving a 3000-key cold scan: allkeys-lfu %d/100, allkeys-lru %d/100", lfu, lru)
	if lfu < 95 {
		t.Errorf("allkeys-lfu kept %d/100 hot keys, want >= 95", lfu)
	}
	if lru > 50 {
		t.Errorf("allkeys-lru kept %d/100 hot keys: the scan should have flushed most of them (is the quota applied?)", lru)
	}
}

func TestEvictionVolatileTTL(t *testing.T) {
	n := startNode(t, withNamespaces(t, policiesYAML))
	c := n.client(t, authed("vttl", "s"))
	fill(t, n, c, "p", 300, nil, 0)
	fill(t, n, c, "t", 600, func(i int) time.Duration { return time.Duration(1000+i) * time.Second }, 0)
	fill(t, n, c, "late", 200, func(int) time.Duration { return 100000 * time.Second }, 0)
	if got := surviving(t, c, "p", 0, 300); got != 300 {
		t.Errorf("volatile-ttl evicted %d keys without TTL", 300-got)
	}
	soon, later := surviving(t, c, "t", 0, 300), surviving(t, c, "t", 300, 600)
	t.Logf("volatile-ttl: shortest-TTL half kept %d/300, longer half %d/300, longest %d/200", soon, later, surviving(t, c, "late", 0, 200))
	if soon >= later {
		t.Errorf("volatile-ttl kept %d of the soonest-expiring keys vs %d of the later ones", soon, later)
	}
	// Only keys without TTL left to evict: writes get OOM.
	c.FlushDB(ctx(t))
	if oom := fill(t, n, c, "p", 1500, nil, 0); oom == 0 {
		t.Error("volatile-ttl with no volatile keys never answered OOM")
	}
}

func TestEvictionNoEviction(t *testing.T) {
	n := startNode(t, withNamespaces(t, policiesYAML))
	c := n.client(t, authed("noev", "s"))
	oom := fill(t, n, c, "k", 1000, nil, 0)
	if oom == 0 {
		t.Fatal("noeviction never answered OOM")
	}
	kept := surviving(t, c, "k", 0, 1000)
	if kept+oom != 1000 {
		t.Errorf("noeviction lost keys: %d kept + %d refused != 1000", kept, oom)
	}
	// Reads and deletes still work over quota; a delete makes room.
	if err := c.Get(ctx(t), "k:0").Err(); err != nil {
		t.Fatalf("GET over quota: %v", err)
	}
	if err := c.Set(ctx(t), "x", "y", 0).Err(); err == nil {
		t.Fatal("SET over quota succeeded under noeviction")
	}
	c.Del(ctx(t), "k:0", "k:1", "k:2", "k:3")
	if err := c.Set(ctx(t), "x", "y", 0).Err(); err != nil {
		t.Fatalf("SET after DEL freed memory: %v", err)
	}
}

func TestNamespaceIsolation(t *testing.T) {
	n := startNode(t, withNamespaces(t, `
namespaces:
  a: {secret: sa, maxmemory: 100kb}
  b: {secret: sb, maxmemory: 100kb}
`))
	a, b := n.client(t, authed("a", "sa")), n.client(t, authed("b", "sb"))
	fill(t, n, b, "k", 200, nil, 0)
	b.Set(ctx(t), "shared", "from-b", 0)
	a.Set(ctx(t), "shared", "from-a", 0)
	fill(t, n, a, "k", 5000, nil, 0) // far over a's quota
	if got := surviving(t, b, "k", 0, 200); got != 200 {
		t.Errorf("namespace a filling its quota evicted %d of b's keys", 200-got)
	}
	if v := b.Get(ctx(t), "shared").Val(); v != "from-b" {
		t.Errorf("b sees shared = %q", v)
	}
	if b.DBSize(ctx(t)).Val() != 201 {
		t.Errorf("b DBSIZE = %d, want 201", b.DBSize(ctx(t)).Val())
	}
	if used, quota := memUsed(t, a); used > quota+1024 {
		t.Errorf("a uses %d over quota %d", used, quota)
	}
	if err := a.Do(ctx(t), "CACHE", "HOTKEYS", "b").Err(); err == nil {
		t.Error("namespace a could read b's hot keys")
	}
	// Wrong secrets and unknown namespaces get the same answer.
	for _, o := range []func(*redis.Options){authed("a", "sb"), authed("nosuch", "sa")} {
		err := n.client(t, o).Ping(ctx(t)).Err()
		if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Errorf("bad credentials: %v", err)
		}
	}
}

func TestNodeMaxMemoryEvictsWriterNamespace(t *testing.T) {
	n := startNode(t, withConfig(func(c *cachenode.Config) { c.MaxMemory = 300 << 10 }), withNamespaces(t, `
namespaces:
  a: {secret: sa}
  b: {secret: sb}
`))
	a, b := n.client(t, authed("a", "sa")), n.client(t, authed("b", "sb"))
	fill(t, n, b, "k", 300, nil, 0)
	fill(t, n, a, "k", 5000, nil, 0)
	if got := surviving(t, b, "k", 0, 300); got != 300 {
		t.Errorf("node maxmemory pressure from a evicted %d of b's keys", 300-got)
	}
	if a.DBSize(ctx(t)).Val() >= 5000 {
		t.Error("a was not evicted under node maxmemory")
	}
	if v, _ := a.ConfigGet(ctx(t), "maxmemory").Result(); v["maxmemory"] != fmt.Sprint(300<<10) {
		t.Errorf("CONFIG GET maxmemory = %v", v)
	}
}

func TestRequireAuth(t *testing.T) {
	n := startNode(t, withConfig(func(c *cachenode.Config) { c.RequireAuth = true }), withNamespaces(t, `
namespaces:
  a: {secret: sa}
`))
	raw := n.client(t, func(o *redis.Options) { o.Protocol = 2; o.DisableIdentity = true })
	if err := raw.Get(ctx(t), "k").Err(); err == nil || err.Error() != "NOAUTH Authentication required." {
		t.Fatalf("GET before AUTH: %v", err)
	}
	c := n.client(t, authed("a", "sa"))
	if err := c.Set(ctx(t), "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET after HELLO AUTH: %v", err)
	}
	conn := raw.Conn()
	defer conn.Close()
	if err := conn.Do(ctx(t), "AUTH", "a", "wrong").Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
		t.Fatalf("AUTH wrong: %v", err)
	}
	if err := conn.Do(ctx(t), "AUTH", "a", "sa").Err(); err != nil {
		t.Fatal(err)
	}
	if v := conn.Get(ctx(t), "k").Val(); v != "v" {
		t.Fatalf("GET after AUTH = %q", v)
	}
}

// TestDefaultSecretRequiresAuth: a secret on the default namespace works as
// Redis's requirepass even without --require-auth.
func TestDefaultSecretRequiresAuth(t *testing.T) {
	n := startNode(t, withNamespaces(t, "namespaces:\n  default: {secret: pw}\n"))
	raw := n.client(t, func(o *redis.Options) { o.Protocol = 2; o.DisableIdentity = true; o.PoolSize = 1 })
	if err := raw.Get(ctx(t), "k").Err(); err == nil || err.Error() != "NOAUTH Authentication required." {
		t.Fatalf("GET before AUTH: %v", err)
	}
	c := n.client(t, func(o *redis.Options) { o.Password = "pw" }) // AUTH <password>, as redis-cli -a does
	if err := c.Set(ctx(t), "k", "v", 0).Err(); err != nil {
		t.Fatalf("after AUTH pw: %v", err)
	}
}

func TestValueSizeAndDefaultTTL(t *testing.T) {
	n := startNode(t, withNamespaces(t, `
namespaces:
  small: {secret: s, maxValueSize: 1kb, defaultTTL: 30s}
`))
	c := n.client(t, authed("small", "s"))
	big := strings.Repeat("x", 1025)
	want := "ERR value of 1025 bytes exceeds the namespace's max value size of 1024 bytes"
	for _, args := range [][]any{{"SET", "k", big}, {"SETEX", "k", "10", big}, {"MSET", "a", "1", "k", big}, {"LPUSH", "l", "a", big},
		{"SADD", "s", big}, {"HSET", "h", "f", big}, {"CAS", "k", "a", big}} {
		if err := c.Do(ctx(t), args...).Err(); err == nil || err.Error() != want {
			t.Errorf("%v: %v", args[0], err)
		}
	}
	if c.DBSize(ctx(t)).Val() != 0 {
		t.Error("a refused write changed the keyspace")
	}
	c.Set(ctx(t), "k", strings.Repeat("x", 1000), 0)
	if err := c.Append(ctx(t), "k", strings.Repeat("y", 25)).Err(); err == nil {
		t.Error("APPEND past the max value size succeeded")
	}
	if ttl := c.TTL(ctx(t), "k").Val(); ttl != 30*time.Second {
		t.Errorf("default TTL: TTL = %v", ttl)
	}
	c.Set(ctx(t), "e", "v", 5*time.Second)
	if ttl := c.TTL(ctx(t), "e").Val(); ttl != 5*time.Second {
		t.Errorf("explicit TTL: %v", ttl)
	}
	// The default namespace allows 1 MB.
	d := n.client(t)
	if err := d.Set(ctx(t), "m", strings.Repeat("x", 1<<20), 0).Err(); err != nil {
		t.Errorf("1 MB value: %v", err)
	}
	if err := d.Set(ctx(t), "m", strings.Repeat("x", 1<<20+1), 0).Err(); err == nil {
		t.Error("1 MB + 1 value accepted")
	}
}

func TestRateLimits(t *testing.T) {
	n := startNode(t, withNamespaces(t, `
namespaces:
  ops: {secret: s, opsPerSecond: 10}
  bw:  {secret: s, bytesPerSecond: 1kb}
`))
	c := n.client(t, authed("ops", "s"), func(o *redis.Options) { o.PoolSize = 1 })
	for i := range 10 {
		if err := c.Incr(ctx(t), "n").Err(); err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
	}
	if err := c.Incr(ctx(t), "n").Err(); err == nil || err.Error() != "ERR namespace 'ops' ops rate limited" {
		t.Fatalf("11th op: %v", err)
	}
	n.clock.Advance(time.Second)
	if v, err := c.Incr(ctx(t), "n").Result(); err != nil || v != 11 {
		t.Fatalf("after a second: %d, %v", v, err)
	}
	b := n.client(t, authed("bw", "s"), func(o *redis.Options) { o.PoolSize = 1 })
	if err := b.Set(ctx(t), "k", strings.Repeat("x", 800), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Get(ctx(t), "k").Err(); err != nil { // 800 more bytes out: in debt now
		t.Fatal(err)
	}
	if err := b.Get(ctx(t), "k").Err(); err == nil || err.Error() != "ERR namespace 'bw' bandwidth rate limited" {
		t.Fatalf("over bandwidth: %v", err)
	}
	n.clock.Advance(2 * time.Second)
	if err := b.Get(ctx(t), "k").Err(); err != nil {
		t.Fatalf("after refill: %v", err)
	}
}

// TestCASRace: 100 goroutines increment one counter with GET + CAS retry
// loops; no update may be lost.
func TestCASRace(t *testing.T) {
	n := startNode(t)
	c := n.client(t, func(o *redis.Options) { o.PoolSize = 100 })
	c.Set(ctx(t), "ctr", "0", 0)
	const workers, each = 100, 3
	var wg sync.WaitGroup
	var retries sync.Map
	start := make(chan struct{})
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range each {
				for {
					cur, err := c.Get(ctx(t), "ctr").Int()
					if err != nil {
						t.Error(err)
						return
					}
					ok, err := c.Do(ctx(t), "CAS", "ctr", fmt.Sprint(cur), fmt.Sprint(cur+1)).Int()
					if err != nil {
						t.Error(err)
						return
					}
					if ok == 1 {
						break
					}
					retries.Store(w, true)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if v, _ := c.Get(ctx(t), "ctr").Int(); v != workers*each {
		t.Fatalf("counter = %d after %d CAS increments", v, workers*each)
	}
	contended := 0
	retries.Range(func(any, any) bool { contended++; return true })
	t.Logf("%d of %d workers saw a failed CAS and retried", contended, workers)
}

func TestPipelining(t *testing.T) {
	n := startNode(t)
	c := n.client(t)
	pipe := c.Pipeline()
	var gets []*redis.StringCmd
	for i := range 1000 {
		pipe.Set(ctx(t), fmt.Sprintf("p:%d", i), i, 0)
		pipe.Incr(ctx(t), fmt.Sprintf("p:%d", i))
		gets = append(gets, pipe.Get(ctx(t), fmt.Sprintf("p:%d", i)))
	}
	pipe.Do(ctx(t), "NOSUCHCMD")
	cmds, _ := pipe.Exec(ctx(t))
	if len(cmds) != 3001 {
		t.Fatalf("%d replies", len(cmds))
	}
	for i, g := range gets {
		if g.Val() != fmt.Sprint(i+1) {
			t.Fatalf("pipelined GET p:%d = %q", i, g.Val())
		}
	}
	if cmds[3000].Err() == nil {
		t.Fatal("unknown command in a pipeline did not fail")
	}
}

func TestNamespaceReload(t *testing.T) {
	n := startNode(t, withNamespaces(t, `
namespaces:
  r: {secret: s}
  gone: {secret: s}
`))
	c := n.client(t, authed("r", "s"))
	g := n.client(t, authed("gone", "s"), func(o *redis.Options) { o.PoolSize = 1 })
	c.Set(ctx(t), "k", strings.Repeat("x", 100), 0)
	g.Set(ctx(t), "k", "v", 0)
	write := func(s string) error {
		tmp := n.nsFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, n.nsFile); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-n.reloads:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("no reload signal")
		}
		return nil
	}
	if err := write("namespaces:\n  r: {secret: s, maxValueSize: 10, policy: noeviction}\n"); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if err := c.Set(ctx(t), "k2", "12345678901", 0).Err(); err == nil {
		t.Error("new maxValueSize not applied")
	}
	if v := c.Get(ctx(t), "k").Val(); len(v) != 100 {
		t.Error("reload lost data")
	}
	if p, _ := c.ConfigGet(ctx(t), "maxmemory-policy").Result(); p["maxmemory-policy"] != "noeviction" {
		t.Errorf("policy after reload: %v", p)
	}
	if err := g.Get(ctx(t), "k").Err(); err == nil || !strings.Contains(err.Error(), "no longer exists") {
		t.Errorf("connection in a removed namespace: %v", err)
	}
	if err := write("namespaces:\n  r: {secret: s, policy: sometimes}\n"); err == nil {
		t.Fatal("bad file accepted")
	}
	if err := c.Set(ctx(t), "k3", "12345678901", 0).Err(); err == nil {
		t.Error("a rejected file changed the config")
	}
}

func TestHotKeysAndMetrics(t *testing.T) {
	n := startNode(t, withNamespaces(t, `
namespaces:
  h: {secret: s, hotKeySampleEvery: 1, prefixDepth: 1}
`))
	c := n.client(t, authed("h", "s"))
	c.Set(ctx(t), "user:hot", "v", 0)
	pipe := c.Pipeline()
	for i := range 300 {
		pipe.Get(ctx(t), "user:hot")
		pipe.Get(ctx(t), fmt.Sprintf("item:%d", i))
	}
	pipe.Exec(ctx(t))
	top, err := c.Do(ctx(t), "CACHE", "HOTKEYS").Slice()
	if err != nil || len(top) == 0 {
		t.Fatalf("CACHE HOTKEYS = %v, %v", top, err)
	}
	first := top[0].([]any)
	if first[0] != "user:hot" || first[1].(int64) < 300 {
		t.Fatalf("hottest = %v", first)
	}
	// The default namespace may read any namespace's hot keys.
	if top2, err := n.client(t).Do(ctx(t), "CACHE", "HOTKEYS", "h").Slice(); err != nil || len(top2) == 0 {
		t.Fatalf("CACHE HOTKEYS h from default: %v, %v", top2, err)
	}
	// The key sample stream: every access sampled (1 in 1 here), newest
	// last, the namespace's own for its connections and all for default's.
	smp, err := c.Do(ctx(t), "CACHE", "SAMPLES", "4").Slice()
	if err != nil || len(smp) != 4 {
		t.Fatalf("CACHE SAMPLES 4 = %v, %v", smp, err)
	}
	if last := smp[3].([]any); last[0] != "h" || last[1] != "item:299" || last[2].(int64) != n.clock.Now().UnixMilli() {
		t.Fatalf("newest sample = %v", last)
	}
	all, err := n.client(t).Do(ctx(t), "CACHE", "SAMPLES", "100000").Slice()
	if err != nil || len(all) != 601 { // the SET and 600 GETs
		t.Fatalf("CACHE SAMPLES from default: %d, %v", len(all), err)
	}
	resp, err := http.Get("http://" + n.addrs.HTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`portico_cachenode_hits_total{namespace="h"} 300`,
		`portico_cachenode_misses_total{namespace="h"} 300`,
		`portico_cachenode_prefix_hits_total{namespace="h",prefix="user"} 300`,
		`portico_cachenode_prefix_misses_total{namespace="h",prefix="item"} 300`,
		`portico_cachenode_prefix_ops_total{namespace="h",prefix="item"} 300`,
		`portico_cachenode_prefix_evictions_total{namespace="h",prefix="user"} 0`,
		`portico_cachenode_prefix_expirations_total{namespace="h",prefix="user"} 0`,
		`portico_cachenode_prefix_memory_bytes{namespace="h",prefix="item"} 0`,
		`portico_cachenode_prefix_command_duration_seconds_bucket{namespace="h",prefix="user",le="+Inf"}`,
		`portico_cachenode_hotkey_estimated_accesses{namespace="h",rank="1"}`,
		`portico_cachenode_command_duration_seconds_bucket{namespace="h"`,
		`portico_cachenode_memory_bytes{namespace="h"}`,
		`portico_cachenode_keys{namespace="h"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// The one key's bytes: the namespace's and its prefix's alike.
	if ns, user := sample(string(body), `portico_cachenode_memory_bytes{namespace="h"}`),
		sample(string(body), `portico_cachenode_prefix_memory_bytes{namespace="h",prefix="user"}`); ns <= 0 || ns != user {
		t.Errorf("namespace memory %v, prefix user %v: want equal and positive", ns, user)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		r, err := http.Get("http://" + n.addrs.HTTP + p)
		if err != nil || r.StatusCode != 200 {
			t.Errorf("%s: %v %v", p, r, err)
		}
		if r != nil {
			r.Body.Close()
		}
	}
}

// sample returns the value of the exposition line that starts with series
// (name and labels), or -1 when there is none.
func sample(body, series string) float64 {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}
