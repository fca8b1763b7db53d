package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/cachenode"
	"github.com/portico-io/portico/internal/eventually"
)

type fakeClock struct{ ms atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ms.Store(time.Now().UnixMilli())
	return c
}
func (c *fakeClock) Now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

func newClient(tb testing.TB, o Options) *Client {
	tb.Helper()
	c, err := New(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

func testCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// stored is what the cache holds at key, decoded (ok false: nothing).
func stored(t *testing.T, rdb redis.UniversalClient, key string) (entry, bool) {
	t.Helper()
	raw, err := rdb.Get(context.Background(), key).Bytes()
	if errors.Is(err, redis.Nil) {
		return entry{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	e, err := decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	return e, true
}

// TestStampede: 1,000 concurrent Gets of a cold key on a three-node
// cluster call the loader once and all see its value.
func TestStampede(t *testing.T) {
	_, addrs := startCluster(t)
	// A generous timeout: under -race on two shared cores 1,000 GETs queue
	// for the pool long enough to time out, and a cache timeout is a
	// fallback to the loader by design.
	c := newClient(t, Options{Addrs: addrs, Timeout: 5 * time.Second, PoolSize: 64})
	ctx := testCtx(t)
	if err := c.rdb.(*redis.ClusterClient).ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() }); err != nil {
		t.Fatal(err) // slot map loaded, one connection per node
	}
	var loads atomic.Int32
	loader := func(ctx context.Context) ([]byte, int64, error) {
		loads.Add(1)
		select { // origin latency, so the callers pile up behind one flight
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
		return []byte("cold value"), 7, nil
	}
	const n = 1000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			v, err := c.Get(ctx, "user:{cold}", loader)
			if err == nil && string(v) != "cold value" {
				err = fmt.Errorf("got %q", v)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := loads.Load(); got != 1 {
		t.Fatalf("loader called %d times, want 1 (fallbacks %v, cache errors %v)", got, val(c.m.fallbacks), val(c.m.cacheErrors))
	}
	if e, ok := stored(t, c.rdb, "user:{cold}"); !ok || e.version != 7 || string(e.payload) != "cold value" {
		t.Fatalf("cache holds %+v %v", e, ok)
	}
}

// TestCacheDownBulkheadAndBreaker: with the node stopped the breaker opens,
// loader calls never exceed the bulkhead, the rest get ErrOverloaded at once
// or, under ServeStale, the value the client holds; the breaker closes
// again when the node is back.
func TestCacheDownBulkheadAndBreaker(t *testing.T) {
	node := startNode(t, cachenode.Config{})
	reg := prometheus.NewRegistry()
	logs := &lockedBuffer{}
	const maxLoaders = 4
	opts := Options{Client: plainClient(t, node.addr), Timeout: 100 * time.Millisecond, MaxLoaders: maxLoaders,
		BreakerFailures: 3, BreakerWindow: 5, BreakerDelay: 200 * time.Millisecond, BreakerSuccesses: 1,
		LocalSize: 64, Overload: ServeStale, Registerer: reg, Logger: slog.New(slog.NewTextHandler(logs, nil))}
	c := newClient(t, opts)
	ctx := testCtx(t)

	var inFlight, maxInFlight, loads atomic.Int32
	release := make(chan struct{})
	entered := make(chan struct{}, 64)
	blocking := func(ctx context.Context) ([]byte, int64, error) {
		loads.Add(1)
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
		return []byte("origin"), 1, nil
	}
	quick := func(context.Context) ([]byte, int64, error) { loads.Add(1); return []byte("warm v1"), 1, nil }

	node.stop()
	// The first failures go to the loader and open the breaker; "warm"
	// is remembered in process for ServeStale.
	for i := 0; c.BreakerState() != circuitbreaker.OpenState; i++ {
		if i == 20 {
			t.Fatal("breaker did not open")
		}
		if v, err := c.Get(ctx, "warm", quick); err != nil || string(v) != "warm v1" {
			t.Fatalf("fallback Get = %q, %v", v, err)
		}
	}
	if got := val(c.m.breakerState); got != 1 {
		t.Fatalf("breaker_state = %v, want 1", got)
	}

	// Fill the bulkhead with loads that block.
	var holders sync.WaitGroup
	for i := range maxLoaders {
		holders.Add(1)
		go func() {
			defer holders.Done()
			if _, err := c.Get(ctx, fmt.Sprintf("slow-%d", i), blocking); err != nil {
				t.Errorf("holder: %v", err)
			}
		}()
	}
	for range maxLoaders {
		<-entered
	}
	// Everyone else is turned away at once: cold keys with ErrOverloaded,
	// "warm" with the value held in process.
	began := time.Now()
	var wg sync.WaitGroup
	var overloaded, stale atomic.Int32
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("cold-%d", i)
			if i%2 == 0 {
				key = "warm"
			}
			v, err := c.Get(ctx, key, blocking)
			switch {
			case errors.Is(err, ErrOverloaded) && key != "warm":
				overloaded.Add(1)
			case err == nil && key == "warm" && string(v) == "warm v1":
				stale.Add(1)
			default:
				t.Errorf("Get(%s) = %q, %v", key, v, err)
			}
		}()
	}
	wg.Wait()
	turnedAway := time.Since(began)
	if overloaded.Load() != 100 || stale.Load() != 100 {
		t.Fatalf("overloaded %d, stale %d; want 100 each", overloaded.Load(), stale.Load())
	}
	close(release)
	holders.Wait()
	if m := maxInFlight.Load(); m > maxLoaders {
		t.Fatalf("%d concurrent loader calls, bulkhead is %d", m, maxLoaders)
	}
	t.Logf("200 callers turned away in %v; max concurrent loads %d", turnedAway, maxInFlight.Load())
	if got := val(c.m.overloaded); got < 200 {
		t.Fatalf("overloaded_total = %v", got)
	}
	if val(c.m.fallbacks) == 0 {
		t.Fatal("no fallbacks counted")
	}

	// The node returns: a probe after BreakerDelay closes the breaker and
	// Gets fill the cache again.
	node.start()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for c.BreakerState() != circuitbreaker.ClosedState {
		c.Get(ctx, "probe", quick)
		select {
		case <-deadline:
			t.Fatalf("breaker still %v", c.BreakerState())
		case <-tick.C:
		}
	}
	if got := val(c.m.breakerState); got != 0 {
		t.Fatalf("breaker_state = %v, want 0", got)
	}
	if v, err := c.Get(ctx, "after", quick); err != nil || string(v) != "warm v1" {
		t.Fatalf("Get after recovery = %q, %v", v, err)
	}
	if _, ok := stored(t, c.rdb, "after"); !ok {
		t.Fatal("the recovered cache was not filled")
	}
	for _, want := range []string{"level=WARN msg=\"cache circuit breaker opened", "circuit breaker half-open", "circuit breaker closed"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no %q in the logs:\n%s", want, logs.String())
		}
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestFailFastWithoutStale: Overload FailFast turns callers away with
// ErrOverloaded even for a key the client has seen.
func TestFailFastWithoutStale(t *testing.T) {
	node := startNode(t, cachenode.Config{})
	c := newClient(t, Options{Client: plainClient(t, node.addr), Timeout: 100 * time.Millisecond, MaxLoaders: 1})
	ctx := testCtx(t)
	node.stop()
	release, entered := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := c.Get(ctx, "a", func(ctx context.Context) ([]byte, int64, error) {
			close(entered)
			<-release
			return []byte("x"), 1, nil
		})
		done <- err
	}()
	<-entered
	if _, err := c.Get(ctx, "b", func(context.Context) ([]byte, int64, error) { return []byte("y"), 1, nil }); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("Get with a full bulkhead = %v, want ErrOverloaded", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestStaleFillRace is the seed's race: a reader reads v41 from the
// origin, a writer commits v42 and invalidates, and the reader's fill of
// v41 is refused; the cache never holds v41 afterwards.
func TestStaleFillRace(t *testing.T) {
	node := startNode(t, cachenode.Config{})
	rdb := plainClient(t, node.addr)
	refreshed := make(chan error, 1)
	reader := newClient(t, Options{Client: rdb, Timeout: time.Second, OnRefresh: func(_ string, err error) { refreshed <- err }})
	writer := newClient(t, Options{Client: plainClient(t, node.addr), Timeout: time.Second})
	ctx := testCtx(t)

	for _, tc := range []struct {
		name string
		// prefill: the key holds v40 before the reader's flight reads it
		// (a stale value being refreshed) or nothing (a miss).
		prefill bool
	}{{"miss", false}, {"refresh", true}} {
		t.Run(tc.name, func(t *testing.T) {
			key := "race:" + tc.name
			if tc.prefill {
				raw := encode(entry{version: 40, soft: 0, payload: []byte("v40")}) // soft-expired
				if err := rdb.Set(ctx, key, raw, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
			readOrigin, writerDone := make(chan struct{}), make(chan struct{})
			got := make(chan string, 1)
			go func() {
				v, err := reader.Get(ctx, key, func(context.Context) ([]byte, int64, error) {
					close(readOrigin) // v41 read from the origin...
					<-writerDone      // ...and stored only after the writer's commit and delete
					return []byte("v41"), 41, nil
				})
				if err != nil {
					t.Error(err)
				}
				got <- string(v)
			}()
			<-readOrigin
			if err := writer.Invalidate(ctx, key, 42); err != nil { // after committing v42
				t.Fatal(err)
			}
			close(writerDone)
			if v := <-got; v != "v40" && v != "v41" {
				t.Fatalf("reader got %q", v)
			}
			if tc.prefill { // the reader got v40 stale; its refresh runs in the background
				if err := <-refreshed; err != nil {
					t.Fatal(err)
				}
			}
			e, ok := stored(t, rdb, key)
			if !ok || !e.tombstone() || e.version != 42 {
				t.Fatalf("cache holds %+v (present %v), want the v42 tombstone", e, ok)
			}
			if val(reader.m.fillsRefused) == 0 {
				t.Fatal("no refused fill counted")
			}
			// The next reader loads v42 and its fill is accepted.
			v, err := reader.Get(ctx, key, func(context.Context) ([]byte, int64, error) { return []byte("v42"), 42, nil })
			if err != nil || string(v) != "v42" {
				t.Fatalf("Get = %q, %v", v, err)
			}
			if e, _ := stored(t, rdb, key); e.version != 42 || e.tombstone() {
				t.Fatalf("cache holds %+v, want v42", e)
			}
		})
	}
}

// TestFillsNeverGoBackwards: readers on four clients (no shared
// single-flight) fill with whatever origin version they read, slowly, while
// a writer commits and invalidates; once the writer stops and the readers
// finish, the cache holds the last version or its tombstone, never older.
func TestFillsNeverGoBackwards(t *testing.T) {
	node := startNode(t, cachenode.Config{})
	rdb := plainClient(t, node.addr)
	ctx := testCtx(t)
	var clients []*Client
	for range 4 {
		clients = append(clients, newClient(t, Options{Client: plainClient(t, node.addr), Timeout: time.Second, SoftTTL: time.Millisecond, HardTTL: time.Minute, NoJitter: true}))
	}
	var origin atomic.Int64
	origin.Store(1)
	const key = "contended"
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := c.Get(ctx, key, func(context.Context) ([]byte, int64, error) {
					v := origin.Load()
					for range rand.IntN(3) { // the loader's latency varies
						runtime.Gosched()
					}
					return fmt.Appendf(nil, "v%d", v), v, nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	writer := clients[0]
	for range 300 {
		v := origin.Add(1) // commit
		if err := writer.Invalidate(ctx, key, v); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	last := origin.Load()
	e, ok := stored(t, rdb, key)
	if !ok || e.version != last {
		t.Fatalf("cache holds version %d (present %v, tombstone %v), last committed %d", e.version, ok, e.tombstone(), last)
	}
	t.Logf("fills refused: %v", val(clients[1].m.fillsRefused)+val(clients[2].m.fillsRefused))
}

// TestSecondDelete: a value older than the writer's version that got in
// after the tombstone (here: written directly) is deleted by the delayed
// second delete; a newer one is kept.
func TestSecondDelete(t *testing.T) {
	node := startNode(t, cachenode.Config{})
	rdb := plainClient(t, node.addr)
	c := newClient(t, Options{Client: rdb, Timeout: time.Second, TombstoneTTL: time.Millisecond, SecondDeleteDelay: 50 * time.Millisecond})
	ctx := testCtx(t)
	if err := c.Invalidate(ctx, "k", 10); err != nil {
		t.Fatal(err)
	}
	if err := c.Invalidate(ctx, "keep", 10); err != nil {
		t.Fatal(err)
	}
	rdb.Set(ctx, "k", encode(entry{version: 9, soft: c.now().UnixMilli() + 60000, payload: []byte("old")}), time.Minute)
	rdb.Set(ctx, "keep", encode(entry{version: 11, soft: c.now().UnixMilli() + 60000, payload: []byte("new")}), time.Minute)
	eventually.True(t, 10*time.Second, "k gone or a tombstone", func() bool { e, ok := stored(t, rdb, "k"); return !ok || e.tombstone() })
	if e, ok := stored(t, rdb, "keep"); !ok || e.version != 11 {
		t.Fatalf("newer value removed: %+v %v", e, ok)
	}
}

// TestSoftTTL: past the soft TTL one caller refreshes in the background
// and everyone is served the stale value meanwhile.
func TestSoftTTL(t *testing.T) {
	node := startNode(t, cachenode.Config{})
	clock := newFakeClock()
	refreshed := make(chan error, 4)
	c := newClient(t, Options{Client: plainClient(t, node.addr), Timeout: time.Second, SoftTTL: 10 * time.Second, HardTTL: time.Hour,
		NoJitter: true, Now: clock.Now, OnRefresh: func(_ string, err error) { refreshed <- err }})
	ctx := testCtx(t)
	var loads atomic.Int32
	release := make(chan struct{})
	loader := func(ctx context.Context) ([]byte, int64, error) {
		n := loads.Add(1)
		if n == 1 {
			return []byte("v1"), 1, nil
		}
		<-release
		return []byte("v2"), 2, nil
	}
	if v, err := c.Get(ctx, "k", loader); err != nil || string(v) != "v1" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	clock.Advance(11 * time.Second)
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v, err := c.Get(ctx, "k", loader); err != nil || string(v) != "v1" {
				t.Errorf("stale Get = %q, %v", v, err)
			}
		}()
	}
	wg.Wait() // all 50 answered while the refresh is still blocked
	close(release)
	if err := <-refreshed; err != nil {
		t.Fatal(err)
	}
	if got := loads.Load(); got != 2 {
		t.Fatalf("loader called %d times, want 2 (fill + one refresh)", got)
	}
	if got := val(c.m.stale); got != 50 {
		t.Fatalf("stale_served_total = %v, want 50", got)
	}
	if v, err := c.Get(ctx, "k", loader); err != nil || string(v) != "v2" {
		t.Fatalf("Get after refresh = %q, %v", v, err)
	}
	select {
	case err := <-refreshed:
		t.Fatalf("a second refresh ran (%v)", err)
	default:
	}
}

// TestHardTTL: past the hard TTL (the server's) the key is a miss.
func TestHardTTL(t *testing.T) {
	node := startNode(t, cachenode.Config{})
	rdb := plainClient(t, node.addr)
	c := newClient(t, Options{Client: rdb, Timeout: time.Second, SoftTTL: 10 * time.Millisecond, HardTTL: 20 * time.Millisecond, NoJitter: true})
	ctx := testCtx(t)
	var loads atomic.Int32
	loader := func(context.Context) ([]byte, int64, error) { loads.Add(1); return []byte("v"), 1, nil }
	c.Get(ctx, "k", loader)
	if ttl := rdb.PTTL(ctx, "k").Val(); ttl <= 0 || ttl > 20*time.Millisecond {
		t.Fatalf("PTTL = %v, want the hard TTL 20ms", ttl)
	}
	eventually.True(t, 10*time.Second, "k gone", func() bool { return rdb.Exists(ctx, "k").Val() == 0 })
	c.Get(ctx, "k", loader)
	if loads.Load() != 2 {
		t.Fatalf("loader calls %d, want 2", loads.Load())
	}
}

// TestNegativeCaching: ErrNotFound is cached for NegativeTTL.
func TestNegativeCaching(t *testing.T) {
	node := startNode(t, cachenode.Config{})
	rdb := plainClient(t, node.addr)
	c := newClient(t, Options{Client: rdb, Timeout: time.Second, NegativeTTL: 3 * time.Second})
	ctx := testCtx(t)
	var loads atomic.Int32
	loader := func(context.Context) ([]byte, int64, error) {
		loads.Add(1)
		return nil, 5, fmt.Errorf("row: %w", ErrNotFound)
	}
	for range 5 {
		if _, err := c.Get(ctx, "missing", loader); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get = %v, want ErrNotFound", err)
		}
	}
	if loads.Load() != 1 {
		t.Fatalf("loader calls %d, want 1", loads.Load())
	}
	e, ok := stored(t, rdb, "missing")
	if !ok || !e.negative() || e.version != 5 {
		t.Fatalf("cache holds %+v", e)
	}
	if ttl := rdb.PTTL(ctx, "missing").Val(); ttl <= 0 || ttl > 3300*time.Millisecond {
		t.Fatalf("PTTL = %v, want ≤ NegativeTTL + 10%%", ttl)
	}
	// A write of the key (version 6) lets the next fill through.
	if err := c.Invalidate(ctx, "missing", 6); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "missing", func(context.Context) ([]byte, int64, error) { return []byte("now"), 6, nil }); err != nil || string(v) != "now" {
		t.Fatalf("Get = %q, %v", v, err)
	}
}

// TestJitter: TTLs spread over [d(1-j), d(1+j)], on the server too.
func TestJitter(t *testing.T) {
	node := startNode(t, cachenode.Config{})
	rdb := plainClient(t, node.addr)
	c := newClient(t, Options{Client: rdb, Timeout: time.Second, SoftTTL: time.Minute, HardTTL: 100 * time.Second, Jitter: 0.2})
	d := 100 * time.Second
	lo, hi := d, d
	for range 10000 {
		j := c.jitter(d)
		if j < 80*time.Second || j > 120*time.Second {
			t.Fatalf("jitter(%v) = %v outside ±20%%", d, j)
		}
		lo, hi = min(lo, j), max(hi, j)
	}
	if lo > 82*time.Second || hi < 118*time.Second {
		t.Fatalf("jitter does not spread: [%v, %v]", lo, hi)
	}
	ctx := testCtx(t)
	var ttls []time.Duration
	for i := range 50 {
		key := fmt.Sprintf("j%d", i)
		c.Get(ctx, key, func(context.Context) ([]byte, int64, error) { return []byte("v"), 1, nil })
		ttl := rdb.PTTL(ctx, key).Val()
		if ttl > 120*time.Second || ttl < 79*time.Second {
			t.Fatalf("PTTL %v outside the hard TTL's jitter", ttl)
		}
		e, _ := stored(t, rdb, key)
		if soft := time.Duration(e.soft-c.now().UnixMilli()) * time.Millisecond; soft > 72*time.Second || soft < 47*time.Second {
			t.Fatalf("soft TTL %v outside ±20%% of 1m", soft)
		}
		ttls = append(ttls, ttl)
	}
	slices.Sort(ttls)
	if ttls[len(ttls)-1]-ttls[0] < 5*time.Second {
		t.Fatalf("server TTLs not spread: %v..%v", ttls[0], ttls[len(ttls)-1])
	}
}

// TestHotKeyLocalCache: a key CACHE HOTKEYS reports (from every primary of
// the cluster) is served from process memory for LocalTTL.
func TestHotKeyLocalCache(t *testing.T) {
	_, addrs := startCluster(t)
	clock := newFakeClock()
	polled := make(chan []string, 16)
	c := newClient(t, Options{Addrs: addrs, Timeout: time.Second, LocalSize: 8, LocalTTL: time.Second, HotKeysInterval: 20 * time.Millisecond,
		HotKeysTop: 4, HotKeysMinCount: 500, Now: clock.Now, SoftTTL: time.Hour, HardTTL: time.Hour,
		OnHotKeys: func(keys []string, err error) {
			if err != nil {
				t.Error(err)
			}
			select {
			case polled <- keys:
			default:
			}
		}})
	ctx := testCtx(t)
	v1 := func(context.Context) ([]byte, int64, error) { return []byte("v1"), 1, nil }
	c.Get(ctx, "cold", v1)
	for range 3000 { // sampled 1 in 100 by the node
		if _, err := c.Get(ctx, "hot", v1); err != nil {
			t.Fatal(err)
		}
	}
	rctx, stop := context.WithCancel(ctx)
	runDone := make(chan error)
	go func() { runDone <- c.Run(rctx) }()
	defer func() { stop(); <-runDone }()
	for keys := range polled {
		if slices.Contains(keys, "hot") {
			if slices.Contains(keys, "cold") {
				t.Fatalf("cold key reported hot: %v", keys)
			}
			break
		}
	}
	c.Get(ctx, "hot", v1) // a hit, kept locally
	// The cluster's value changes; the local copy is served until LocalTTL.
	raw := encode(entry{version: 2, soft: clock.Now().Add(time.Hour).UnixMilli(), payload: []byte("v2")})
	if err := c.rdb.Set(ctx, "hot", raw, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.Get(ctx, "hot", v1); string(v) != "v1" {
		t.Fatalf("local Get = %q, want v1", v)
	}
	if val(c.m.localHits) != 1 {
		t.Fatalf("local_hits_total = %v", val(c.m.localHits))
	}
	clock.Advance(1001 * time.Millisecond)
	if v, _ := c.Get(ctx, "hot", v1); string(v) != "v2" {
		t.Fatalf("Get after LocalTTL = %q, want v2", v)
	}
	// Invalidate drops the local copy at once.
	c.Get(ctx, "hot", v1)
	if err := c.Invalidate(ctx, "hot", 3); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.Get(ctx, "hot", func(context.Context) ([]byte, int64, error) { return []byte("v3"), 3, nil }); string(v) != "v3" {
		t.Fatalf("Get after Invalidate = %q, want v3", v)
	}
}

// TestReplicaRetry: a primary read that times out is retried once on the
// replica client.
func TestReplicaRetry(t *testing.T) {
	node := startNode(t, cachenode.Config{})
	proxy := newDropProxy(t, node.addr)
	c := newClient(t, Options{Client: plainClient(t, proxy.addr()), Replica: plainClient(t, node.addr), Timeout: 100 * time.Millisecond})
	ctx := testCtx(t)
	var loads atomic.Int32
	loader := func(context.Context) ([]byte, int64, error) { loads.Add(1); return []byte("v"), 1, nil }
	c.Get(ctx, "k", loader)
	proxy.dropping.Store(true)
	began := time.Now()
	if v, err := c.Get(ctx, "k", loader); err != nil || string(v) != "v" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	if loads.Load() != 1 || val(c.m.replicaReads) != 1 || val(c.m.hits) != 1 {
		t.Fatalf("loads %d, replica reads %v, hits %v", loads.Load(), val(c.m.replicaReads), val(c.m.hits))
	}
	t.Logf("timed-out primary + replica read: %v", time.Since(began))
}

// TestPrimaryDownReplicaRead: on a cluster with one replica per primary,
// with the key's primary stopped, Get is answered by the replica (the
// client New builds from addresses: a READONLY ClusterClient for the
// retry) instead of going to the loader.
func TestPrimaryDownReplicaRead(t *testing.T) {
	nodes, addrs := startClusterN(t, true)
	c := newClient(t, Options{Addrs: addrs[:3], Timeout: 200 * time.Millisecond, BreakerFailures: 50, BreakerWindow: 100})
	ctx := testCtx(t)
	var loads atomic.Int32
	loader := func(context.Context) ([]byte, int64, error) { loads.Add(1); return []byte("v"), 1, nil }
	const key = "user:1" // slot 10778: node 1, replica node 4
	if _, err := c.Get(ctx, key, loader); err != nil {
		t.Fatal(err)
	}
	replica := plainClient(t, nodes[4].addr)
	if err := replica.ReadOnly(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "the key on the replica", func() bool { return replica.Exists(ctx, key).Val() == 1 })
	// The replica client must know the map with the replicas (New's warm-up
	// loaded it before the replicas were surely in it).
	c.replica.(*redis.ClusterClient).ReloadState(ctx)
	nodes[1].stop()
	for range 5 {
		if v, err := c.Get(ctx, key, loader); err != nil || string(v) != "v" {
			t.Fatalf("Get = %q, %v", v, err)
		}
	}
	if loads.Load() != 1 || val(c.m.replicaReads) != 5 || val(c.m.hits) != 5 {
		t.Fatalf("loads %d, replica reads %v, hits %v", loads.Load(), val(c.m.replicaReads), val(c.m.hits))
	}
}

func TestClosed(t *testing.T) {
	node := startNode(t, cachenode.Config{})
	c, err := New(Options{Addrs: []string{node.addr}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(context.Background(), "k", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close = %v", err)
	}
	if err := c.Invalidate(context.Background(), "k", 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Invalidate after Close = %v", err)
	}
}

func TestOptionsValidated(t *testing.T) {
	for _, o := range []Options{
		{},
		{Addrs: []string{"x:1"}, SoftTTL: time.Hour, HardTTL: time.Minute},
		{Addrs: []string{"x:1"}, Jitter: 1.5},
		{Addrs: []string{"x:1"}, Overload: ServeStale},
		{Addrs: []string{"x:1"}, Timeout: -1},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(encode(entry{version: 3, soft: 5, payload: []byte("x")}))
	f.Add([]byte{magic0, magic1})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decode(b)
		if err != nil {
			return
		}
		if got, _ := decode(encode(e)); got.version != e.version || got.soft != e.soft || string(got.payload) != string(e.payload) || got.flags != e.flags {
			t.Fatalf("round trip %+v != %+v", got, e)
		}
	})
}

// val reads a counter or gauge.
func val(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}
