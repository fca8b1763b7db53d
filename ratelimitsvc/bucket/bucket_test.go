package bucket_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/cachenode/cachetest"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/ratelimitsvc/bucket"
)

// store is what the suite needs from a backend.
type store interface {
	Check(ctx context.Context, items []bucket.Item) (bucket.Decision, error)
}

var (
	_ store = (*bucket.Memory)(nil)
	_ store = (*bucket.Redis)(nil)
)

// base is a day-aligned instant, so fixed windows start at offset 0.
var base = time.UnixMilli(19675 * 86_400_000)

// clock is a manual clock, safe for concurrent reads.
type clock struct{ ms atomic.Int64 }

func (c *clock) Now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *clock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// prefix returns a key prefix no other test or run uses.
func prefix(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "portico:test:" + t.Name() + ":" + hex.EncodeToString(b[:]) + ":"
}

// remotes are the shared stores a test runs against besides Redis: a
// Redis Cluster, a cachenode and a cachenode cluster (nil: not used).
type remotes struct{ cluster, cacheNode, cacheCluster redis.UniversalClient }

// remoteNames are the stores backends returns besides memory, when set.
var remoteNames = []string{"redis", "cluster", "cachenode", "cachenode-cluster"}

// allRemotes starts every remote store for t: a Redis Cluster, and a
// cachenode and a 3-node cachenode cluster in this process (the Redis
// store runs unchanged on them, EVALSHA and ClusterClient included).
func allRemotes(t *testing.T) remotes {
	return remotes{cluster: redisCluster(t), cacheNode: cacheNode(t), cacheCluster: cacheNodeCluster(t)}
}

// backends returns the memory store, a Redis store and a store on each
// remote set in r, all on clk.
func backends(t *testing.T, clk *clock, r remotes) map[string]store {
	mem := bucket.NewMemory()
	mem.Now = clk.Now
	addr := testdeps.Redis(t)
	c := bucket.NewRedisClient(addr)
	t.Cleanup(func() { _ = c.Close() })
	st := map[string]store{"memory": mem, "redis": redisStore(t, c, clk)}
	for name, rc := range map[string]redis.UniversalClient{"cluster": r.cluster, "cachenode": r.cacheNode, "cachenode-cluster": r.cacheCluster} {
		if rc != nil {
			st[name] = redisStore(t, rc, clk)
		}
	}
	return st
}

// cacheNode starts a cachenode for t and returns a client of it, made as
// ratelimitsvc makes one (bucket.NewClient).
func cacheNode(t *testing.T) redis.UniversalClient {
	t.Helper()
	c := bucket.NewClient(bucket.ClientConfig{Addr: cachetest.Node(t)})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// cacheNodeCluster starts a 3-node cachenode cluster for t and returns a
// go-redis ClusterClient of it, seeded with every node.
func cacheNodeCluster(t *testing.T) redis.UniversalClient {
	t.Helper()
	c := bucket.NewClient(bucket.ClientConfig{Addr: strings.Join(cachetest.Cluster(t, 3), ",")})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func redisStore(t *testing.T, c redis.UniversalClient, clk *clock) *bucket.Redis {
	t.Helper()
	rd, err := bucket.NewRedis(bucket.RedisConfig{Client: c, Timeout: 2 * time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return rd
}

// redisCluster starts a 3-primary Redis Cluster for t and returns a client
// of it (seeded with every primary, as a deployment would be).
func redisCluster(t *testing.T) redis.UniversalClient {
	t.Helper()
	var seeds []string
	for _, p := range testdeps.RedisCluster(t, 3) {
		seeds = append(seeds, p.Addr)
	}
	c := bucket.NewClient(bucket.ClientConfig{Addr: strings.Join(seeds, ",")})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestScripts runs every testdata script against the memory store, Redis,
// a Redis Cluster, a cachenode and a cachenode cluster, with injected time. Every rule's bucket has a hash
// tag of its own, so on the Cluster a check of several rules is decided
// slot by slot (and given back when denied) — with the same answers.
// Script lines:
//
//	rule <name> tb|fw|sw limit=N [burst=N] window=D
//	advance D
//	check <name,...> [cost=N] [lease=N] [shadow=name,...]
//	=> <expected decision>
func TestScripts(t *testing.T) {
	t.Parallel() // each starts a Cluster of its own: overlap the starts
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) == 0 {
		t.Fatal("no scripts")
	}
	r := allRemotes(t)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			clk := &clock{}
			for name, st := range backends(t, clk, r) {
				t.Run(name, func(t *testing.T) {
					clk.ms.Store(base.UnixMilli())
					runScript(t, f, st, clk, prefix(t))
				})
			}
		})
	}
}

func runScript(t *testing.T, file string, st store, clk *clock, pfx string) {
	fh, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	items := map[string]bucket.Item{}
	var got string
	sc := bufio.NewScanner(fh)
	for ln := 1; sc.Scan(); ln++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		switch f[0] {
		case "rule":
			it := bucket.Item{Key: pfx + "{" + f[1] + "}", Veto: true}
			switch f[2] {
			case "fw":
				it.Kind = bucket.FixedWindow
			case "sw":
				it.Kind = bucket.SlidingWindow
			}
			var burst uint64
			for _, kv := range f[3:] {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "limit":
					it.Limit, _ = strconv.ParseUint(v, 10, 64)
				case "burst":
					burst, _ = strconv.ParseUint(v, 10, 64)
				case "window":
					it.Window, _ = time.ParseDuration(v)
				}
			}
			it.Capacity = it.Limit + burst
			items[f[1]] = it
		case "advance":
			d, err := time.ParseDuration(f[1])
			if err != nil {
				t.Fatalf("%s:%d: %v", file, ln, err)
			}
			clk.Advance(d)
		case "check":
			cost, lease := uint64(1), uint64(0)
			shadow := map[string]bool{}
			for _, kv := range f[2:] {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "cost":
					cost, _ = strconv.ParseUint(v, 10, 64)
				case "lease":
					lease, _ = strconv.ParseUint(v, 10, 64)
				case "shadow":
					for _, s := range strings.Split(v, ",") {
						shadow[s] = true
					}
				}
			}
			names := strings.Split(f[1], ",")
			var req []bucket.Item
			for _, n := range names {
				it := items[n]
				it.Cost, it.Veto, it.Lease = cost, !shadow[n], lease
				req = append(req, it)
			}
			d, err := st.Check(context.Background(), req)
			if err != nil {
				t.Fatalf("%s:%d: %v", file, ln, err)
			}
			got = format(names, d)
		case "=>":
			want := strings.TrimSpace(strings.TrimPrefix(line, "=>"))
			if got != want {
				t.Errorf("%s:%d:\n got  %s\n want %s", file, ln, got, want)
			}
		default:
			t.Fatalf("%s:%d: unknown command %q", file, ln, f[0])
		}
	}
}

func format(names []string, d bucket.Decision) string {
	var b strings.Builder
	fmt.Fprintf(&b, "commit=%v", d.Committed)
	for i, r := range d.Results {
		verdict := "deny"
		if r.Allowed {
			verdict = "allow"
		}
		fmt.Fprintf(&b, " %s:%s rem=%d retry=%s reset=%s", names[i], verdict, r.Remaining, r.RetryAfter, r.ResetAfter)
		if r.Leased > 0 {
			fmt.Fprintf(&b, " leased=%d", r.Leased)
		}
	}
	return b.String()
}

// The production path takes time from Redis TIME; check it admits exactly
// the capacity of a bucket that cannot refill during the test.
func TestRedisServerTime(t *testing.T) {
	c := bucket.NewRedisClient(testdeps.Redis(t))
	defer c.Close()
	rd, err := bucket.NewRedis(bucket.RedisConfig{Client: c, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	it := bucket.Item{Key: prefix(t) + "{x}:k", Limit: 5, Capacity: 5, Window: time.Hour, Cost: 1, Veto: true}
	allowed := 0
	for range 8 {
		d, err := rd.Check(context.Background(), []bucket.Item{it})
		if err != nil {
			t.Fatal(err)
		}
		if d.Committed {
			allowed++
		}
	}
	if allowed != 5 {
		t.Fatalf("allowed %d, want 5", allowed)
	}
	ttl := c.PTTL(context.Background(), it.Key).Val()
	if ttl < time.Hour || ttl > 2*time.Hour {
		t.Fatalf("ttl %v, want about 2h (twice the refill time)", ttl)
	}
}

type noscript struct{}

func (noscript) Error() string { return "NOSCRIPT No matching script. Please use EVAL." }
func (noscript) RedisError()   {}

// forgetful answers the first EVALSHA with NOSCRIPT (as after a Redis
// restart or failover) without touching the shared server's script cache,
// and records the script commands.
type forgetful struct {
	mu     sync.Mutex
	forgot bool
	cmds   []string
}

func (f *forgetful) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *forgetful) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (f *forgetful) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		f.mu.Lock()
		name := strings.ToLower(cmd.Name())
		if name == "script" {
			name += " " + strings.ToLower(fmt.Sprint(cmd.Args()[1]))
		}
		if name == "evalsha" || strings.HasPrefix(name, "script") {
			f.cmds = append(f.cmds, name)
		}
		first := name == "evalsha" && !f.forgot
		if first {
			f.forgot = true
		}
		f.mu.Unlock()
		if first {
			cmd.SetErr(noscript{})
			return noscript{}
		}
		return next(ctx, cmd)
	}
}

// NOSCRIPT → SCRIPT LOAD → EVALSHA again, inside one Check.
func TestRedisNoScriptReloads(t *testing.T) {
	c := bucket.NewRedisClient(testdeps.Redis(t))
	defer c.Close()
	hook := &forgetful{}
	c.AddHook(hook)
	rd, err := bucket.NewRedis(bucket.RedisConfig{Client: c, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	it := bucket.Item{Key: prefix(t) + "{x}:k", Limit: 1, Capacity: 1, Window: time.Hour, Cost: 1, Veto: true}
	for i, want := range []bool{true, false} {
		d, err := rd.Check(context.Background(), []bucket.Item{it})
		if err != nil || d.Committed != want {
			t.Fatalf("check %d: %v %v, want committed=%v", i, d, err, want)
		}
	}
	if got := strings.Join(hook.cmds, ","); got != "evalsha,script load,evalsha,evalsha" {
		t.Fatalf("commands %s", got)
	}
}

// TestMemoryMatchesRedis drives the stores with the same random
// requests (every kind, odd limits and windows, costs, leases, shadow items,
// time jumps within and across windows) and requires identical decisions:
// the Go arithmetic and check.lua must never drift apart, and on the Cluster,
// where the buckets of one request lie in several slots, giving back the
// commits of a denied request (refund.lua) must leave every bucket as if it
// had never been checked.
//
// Redis expires a short window's bucket after 1s of real time while the
// injected clock may not have moved: the test relies on steps being quick,
// so it runs alone, after a warm-up.
func TestMemoryMatchesRedis(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(base.UnixMilli() + 12_345)
	st := backends(t, clk, allRemotes(t))
	mem := st["memory"]
	pfx := prefix(t)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := mrand.New(mrand.NewPCG(uint64(seed), 7))
	windows := []time.Duration{time.Millisecond * 7, 250 * time.Millisecond, time.Second, 3 * time.Second, time.Minute}
	var pool []bucket.Item
	for i := range 12 {
		it := bucket.Item{
			Key:    fmt.Sprintf("%s{%d}", pfx, i),
			Kind:   bucket.Kind(i % 3),
			Limit:  1 + rng.Uint64N(20),
			Window: windows[rng.IntN(len(windows))],
		}
		it.Capacity = it.Limit
		if it.Kind == bucket.TokenBucket {
			it.Capacity += rng.Uint64N(10)
		}
		pool = append(pool, it)
	}
	ctx := context.Background()
	warmUp(t, pfx, st["redis"], st["cluster"], st["cachenode"], st["cachenode-cluster"])
	for step := range 1500 {
		if rng.IntN(3) == 0 {
			clk.Advance(time.Duration(rng.Int64N(1500)) * time.Millisecond)
		}
		var req []bucket.Item
		for _, j := range rng.Perm(len(pool))[:1+rng.IntN(3)] {
			it := pool[j]
			it.Cost = rng.Uint64N(it.Capacity + 2)
			it.Veto = rng.IntN(4) != 0
			if rng.IntN(3) == 0 {
				it.Lease = rng.Uint64N(5)
			}
			req = append(req, it)
		}
		a, err := mem.Check(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range remoteNames {
			b, err := st[name].Check(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(a) != fmt.Sprint(b) {
				t.Fatalf("step %d (seed %d): %+v\nmemory  %+v\n%-7s %+v", step, seed, req, a, name, b)
			}
		}
	}
	for _, name := range []string{"cluster", "cachenode-cluster"} {
		given, failed := st[name].(*bucket.Redis).Refunds()
		t.Logf("%s refunds: %d given, %d failed", name, given, failed)
		if given == 0 || failed != 0 {
			t.Fatalf("%s refunds: %d given, %d failed; want some given and none failed", name, given, failed)
		}
	}
}

// Concurrent multi-key checks on the striped memory store: requests over
// overlapping key sets in different orders never deadlock, and every key's
// count in the store equals the committed requests that include it, never
// above its limit (each request's commit is atomic across its keys).
func TestMemoryConcurrentMultiKey(t *testing.T) {
	m := bucket.NewMemory()
	const limit, keys = 300, 8
	item := func(k int, cost uint64) bucket.Item {
		return bucket.Item{Key: fmt.Sprintf("k%d", k), Kind: bucket.FixedWindow, Limit: limit, Window: time.Hour, Cost: cost, Veto: true}
	}
	var wg sync.WaitGroup
	var taken [keys]atomic.Int64
	for g := range 32 {
		wg.Go(func() {
			for i := range 200 {
				a, b := (g+i)%keys, (g*7+i*3)%keys
				if a == b {
					b = (b + 1) % keys
				}
				d, _ := m.Check(context.Background(), []bucket.Item{item(a, 1), item(b, 1)})
				if d.Committed {
					taken[a].Add(1)
					taken[b].Add(1)
				}
			}
		})
	}
	wg.Wait()
	for k := range keys {
		d, _ := m.Check(context.Background(), []bucket.Item{item(k, 0)})
		used := int64(limit - d.Results[0].Remaining)
		if used != taken[k].Load() || used > limit {
			t.Errorf("key %d: store used %d, committed requests took %d (limit %d)", k, used, taken[k].Load(), limit)
		}
	}
}

// TestClusterConcurrentMultiSlot is TestMemoryConcurrentMultiKey on a Redis
// Cluster with every key in a slot of its own: requests over two slots at
// once, many denied (and given back) as keys run dry. In the end every
// key's count equals the committed requests that include it, never above
// its limit: no overshoot, and every denied request's commits were given
// back.
func TestClusterConcurrentMultiSlot(t *testing.T) {
	t.Parallel() // each starts a Cluster of its own: overlap the starts
	t.Run("redis", func(t *testing.T) { concurrentMultiSlot(t, redisCluster(t)) })
	t.Run("cachenode", func(t *testing.T) { concurrentMultiSlot(t, cacheNodeCluster(t)) })
}

func concurrentMultiSlot(t *testing.T, c redis.UniversalClient) {
	// A generous timeout: a check that timed out would leave its commit
	// unknown, and under -race on a loaded machine 32 callers can queue
	// for seconds behind in-process nodes.
	rd, err := bucket.NewRedis(bucket.RedisConfig{Client: c, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pfx := prefix(t)
	// A day to refill one token bucket: nothing refills during the test.
	const limit, keys = 150, 8
	item := func(k int, cost uint64) bucket.Item {
		return bucket.Item{Key: fmt.Sprintf("%s{%d}", pfx, k), Limit: limit, Capacity: limit, Window: limit * 24 * time.Hour, Cost: cost, Veto: true}
	}
	var wg sync.WaitGroup
	var taken [keys]atomic.Int64
	var denied atomic.Int64
	for g := range 32 {
		wg.Go(func() {
			for i := range 40 {
				a, b := (g+i)%keys, (g*7+i*3)%keys
				if a == b {
					b = (b + 1) % keys
				}
				d, err := rd.Check(context.Background(), []bucket.Item{item(a, 1), item(b, 1)})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Committed {
					taken[a].Add(1)
					taken[b].Add(1)
				} else {
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	given, failed := rd.Refunds()
	t.Logf("%d requests denied, %d refunds given, %d failed", denied.Load(), given, failed)
	if denied.Load() == 0 || given == 0 || failed != 0 {
		t.Fatalf("want denials and refunds, none failed")
	}
	for k := range keys {
		d, err := rd.Check(context.Background(), []bucket.Item{item(k, 0)})
		if err != nil {
			t.Fatal(err)
		}
		used := int64(limit - d.Results[0].Remaining)
		if used != taken[k].Load() || used > limit {
			t.Errorf("key %d: store used %d, committed requests took %d (limit %d)", k, used, taken[k].Load(), limit)
		}
	}
}

// warmUp connects the stores to every shard and loads both scripts
// (a request denied over 12 slots makes the Cluster give some back), so
// that no step of a test waits for that.
func warmUp(t *testing.T, pfx string, stores ...store) {
	t.Helper()
	var items []bucket.Item
	for i := range 12 {
		items = append(items, bucket.Item{Key: fmt.Sprintf("%swarm:{%d}", pfx, i), Limit: 1, Capacity: 1, Window: time.Second, Cost: 1, Veto: true})
	}
	items[11].Cost = 2
	for _, st := range stores {
		if d, err := st.Check(context.Background(), items); err != nil || d.Committed {
			t.Fatalf("warm-up: %+v %v, want denied", d, err)
		}
	}
}

// TestPrepareLoadsScriptsOnEveryPrimary: Prepare (ratelimitsvc's
// readiness at start) leaves both bucket scripts on every primary of a
// cachenode cluster, so the first decision after a start runs its EVALSHA
// at once instead of a NOSCRIPT and a SCRIPT LOAD to every primary inside
// one request's timeout.
func TestPrepareLoadsScriptsOnEveryPrimary(t *testing.T) {
	cc, ok := cacheNodeCluster(t).(*redis.ClusterClient)
	if !ok {
		t.Fatal("bucket.NewClient of several addresses is not a ClusterClient")
	}
	var shas []string
	for _, f := range []string{"check.lua", "refund.lua"} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		shas = append(shas, redis.NewScript(string(src)).Hash())
	}
	ctx := context.Background()
	// loaded counts the primaries holding both scripts, and all primaries.
	loaded := func() (with, all int) {
		var mu sync.Mutex
		err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			exists, err := m.ScriptExists(ctx, shas...).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			all++
			if !slices.Contains(exists, false) {
				with++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return with, all
	}
	if with, all := loaded(); with != 0 || all != 3 {
		t.Fatalf("before Prepare: scripts on %d of %d primaries, want 0 of 3", with, all)
	}
	rd, err := bucket.NewRedis(bucket.RedisConfig{Client: cc, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := rd.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if with, all := loaded(); with != all || all != 3 {
		t.Fatalf("after Prepare: scripts on %d of %d primaries, want all 3", with, all)
	}
}
