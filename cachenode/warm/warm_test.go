package warm_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/cachenode"
	"github.com/portico-io/portico/cachenode/samples"
	"github.com/portico-io/portico/cachenode/warm"
)

// startNode runs a standalone cache node with a namespace "app" (secret
// "s") sampling every access, and returns a client of the default
// namespace and one of app.
func startNode(t *testing.T) (*redis.Client, *redis.Client) {
	t.Helper()
	ns := filepath.Join(t.TempDir(), "ns.yaml")
	if err := os.WriteFile(ns, []byte("namespaces:\n  app: {secret: s, hotKeySampleEvery: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ready := make(chan cachenode.Addrs, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- cachenode.Run(ctx, cachenode.Config{RESPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", NamespacesFile: ns, Ready: ready, InsecurePlaintext: true})
	}()
	var a cachenode.Addrs
	select {
	case a = <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("cachenode did not start")
	}
	t.Cleanup(func() {
		cancel()
		<-done
	})
	c := redis.NewClient(&redis.Options{Addr: a.RESP, Protocol: 3})
	app := redis.NewClient(&redis.Options{Addr: a.RESP, Protocol: 3, Username: "app", Password: "s"})
	t.Cleanup(func() { c.Close(); app.Close() })
	return c, app
}

func TestTop(t *testing.T) {
	ss := []samples.Sample{{NS: "a", Key: "x"}, {NS: "a", Key: "y"}, {NS: "a", Key: "x"}, {NS: "b", Key: "x"}, {NS: "a", Key: "z"}}
	got := warm.Top(ss, "a", 2)
	if len(got) != 2 || got[0] != (warm.Key{NS: "a", Key: "x", Count: 2}) || got[1].Key != "y" {
		t.Fatalf("Top = %+v", got)
	}
}

// TestWarmAfterColdStart: traffic on one node is sampled; a new, empty
// node is warmed from those samples against an HTTP origin. Every found
// key is loaded exactly once, a key cached meanwhile is not overwritten,
// missing keys are skipped, and the reported hit rate climbs to the share
// of the sampled traffic that the origin can serve.
func TestWarmAfterColdStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, before := startNode(t)
	// Zipf-ish traffic: key i accessed 40/(i+1) times; "gone:*" keys are
	// not at the origin.
	for i := range 40 {
		key := "item:" + strconv.Itoa(i)
		if i%10 == 9 {
			key = "gone:" + strconv.Itoa(i)
		}
		for range 40 / (i + 1) {
			before.Get(ctx, key)
		}
	}
	ss, err := warm.Collect(ctx, []*redis.Client{admin}, 100000)
	if err != nil {
		t.Fatal(err)
	}
	keys := warm.Top(ss, "app", 0)
	if len(keys) != 40 || keys[0].Key != "item:0" || keys[0].Count != 40 {
		t.Fatalf("ranked %d keys, first %+v", len(keys), keys[0])
	}
	total := 0
	gone := 0
	for _, k := range keys {
		total += k.Count
		if strings.HasPrefix(k.Key, "gone:") {
			gone += k.Count
		}
	}

	var mu sync.Mutex
	loads := map[string]int{}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.URL.Path, "/items/")
		mu.Lock()
		loads[key]++
		mu.Unlock()
		if strings.HasPrefix(key, "gone:") {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("origin:" + key))
	}))
	defer origin.Close()

	_, after := startNode(t) // the cold node
	if err := after.Set(ctx, "item:1", "newer", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var rates []float64
	var reports atomic.Int64
	p, err := warm.Run(ctx, warm.Config{Keys: keys, Cache: warm.RedisCache{Client: after, TTL: time.Hour},
		Load: warm.HTTPLoader{URL: origin.URL + "/items/{key}"}.Load, Rate: 400, ReportEvery: 20 * time.Millisecond,
		Report: func(p warm.Progress) { reports.Add(1); rates = append(rates, p.HitRate) }})
	if err != nil {
		t.Fatal(err)
	}
	if p.Done != 40 || p.AlreadyCached != 1 || p.NotFound != 4 || p.Failed != 0 || p.Loaded != 35 {
		t.Fatalf("progress %s", p)
	}
	want := float64(total-gone) / float64(total)
	if p.HitRate != want || rates[0] != float64(keys[1].Count)/float64(total) || rates[len(rates)-1] != want {
		t.Fatalf("hit rate %v (reports %v), want from item:1's share to %v", p.HitRate, rates, want)
	}
	for i := 1; i < len(rates); i++ {
		if rates[i] < rates[i-1] {
			t.Fatalf("hit rate fell: %v", rates)
		}
	}
	if reports.Load() < 2 {
		t.Fatalf("%d reports", reports.Load())
	}
	for k, n := range loads {
		if n != 1 || k == "item:1" {
			t.Fatalf("origin load of %s: %d times", k, n)
		}
	}
	if v := after.Get(ctx, "item:1").Val(); v != "newer" {
		t.Fatalf("warming overwrote a cached value: %q", v)
	}
	if v := after.Get(ctx, "item:0").Val(); v != "origin:item:0" {
		t.Fatalf("item:0 after warming = %q", v)
	}
	if ttl := after.TTL(ctx, "item:0").Val(); ttl <= 0 || ttl > time.Hour {
		t.Fatalf("TTL of a warmed key: %v", ttl)
	}
	t.Logf("%s", p)
}
