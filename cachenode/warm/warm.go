// Package warm refills a cache after a cold start (a restart, a promoted
// replica that missed writes, a new cluster): it ranks the keys of a key
// sample stream (CACHE SAMPLES, collected before the restart) by how often
// they were accessed, and loads the most frequent ones from the origin
// into the cache at a rate the origin can absorb, reporting the hit rate
// the sampled traffic would see as it climbs.
//
// Keys already cached are not loaded again, and a fill never overwrites a
// value written meanwhile (SET NX): the application's own writes win.
package warm

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/portico-io/portico/cachenode/samples"
)

// Key is one key and how many sampled accesses it had.
type Key struct {
	NS    string
	Key   string
	Count int
}

// Top ranks the samples of namespace ns by access count, most accessed
// first (ties by key), and keeps the first n (n ≤ 0: all).
func Top(ss []samples.Sample, ns string, n int) []Key {
	counts := map[string]int{}
	for _, s := range ss {
		if s.NS == ns {
			counts[s.Key]++
		}
	}
	out := make([]Key, 0, len(counts))
	for k, c := range counts {
		out = append(out, Key{NS: ns, Key: k, Count: c})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Key < out[j].Key
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// ErrNotFound is what a Loader returns for a key the origin does not have
// (it is skipped, not retried).
var ErrNotFound = errors.New("warm: not found at the origin")

// Cache is the warmer's view of the cache.
type Cache interface {
	// Cached reports, for each key, whether the cache holds it.
	Cached(ctx context.Context, keys []string) ([]bool, error)
	// Fill stores value at key unless the key exists (SET NX with a TTL).
	Fill(ctx context.Context, key string, value []byte) error
}

// Config configures Run.
type Config struct {
	Keys  []Key
	Cache Cache
	// Load fetches a key's value from the origin, and Cache.Fill stores it.
	Load func(ctx context.Context, key string) ([]byte, error)
	// Get, when set, replaces Load and Fill: a cache-aside read that loads
	// on a miss, for caches whose values the application writes in its own
	// format (cachenode/client's versioned values: its Get with the origin
	// as the loader). It returns ErrNotFound for keys the origin lacks.
	Get func(ctx context.Context, key string) error
	// Rate is how many origin loads per second (default 100).
	Rate float64
	// Concurrency is how many loads may be in flight (default 4).
	Concurrency int
	// Report, when set, is called every ReportEvery (default 1 s) and at
	// the end.
	Report      func(Progress)
	ReportEvery time.Duration
}

// Progress is where a run stands.
type Progress struct {
	Keys          int // to warm
	Done          int // looked at
	AlreadyCached int
	Loaded        int
	NotFound      int
	Failed        int
	// HitRate is the share of the sampled accesses whose key is now cached:
	// the hit rate the sampled traffic would see, climbing as keys load.
	HitRate float64
	Elapsed time.Duration
}

func (p Progress) String() string {
	return fmt.Sprintf("%d/%d keys: %d loaded, %d already cached, %d not found, %d failed; hit rate of the sampled traffic %.1f%% after %s",
		p.Done, p.Keys, p.Loaded, p.AlreadyCached, p.NotFound, p.Failed, 100*p.HitRate, p.Elapsed.Round(time.Millisecond))
}

// Run warms the cache with cfg.Keys, most accessed first, until they are
// all done or ctx ends. Failed loads are counted and skipped.
func Run(ctx context.Context, cfg Config) (Progress, error) {
	if cfg.Cache == nil || (cfg.Load == nil && cfg.Get == nil) {
		return Progress{}, errors.New("warm: Cache and Load (or Get) are required")
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 100
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	if cfg.ReportEvery <= 0 {
		cfg.ReportEvery = time.Second
	}
	start := time.Now()
	total := 0
	for _, k := range cfg.Keys {
		total += k.Count
	}
	p := Progress{Keys: len(cfg.Keys)}
	hits := 0 // sampled accesses whose key is cached
	rate := func() float64 {
		if total == 0 {
			return 1
		}
		return float64(hits) / float64(total)
	}
	report := func() {
		if cfg.Report != nil {
			p.HitRate, p.Elapsed = rate(), time.Since(start)
			cfg.Report(p)
		}
	}
	// What is cached already, in batches.
	cached := make([]bool, len(cfg.Keys))
	const batch = 512
	for i := 0; i < len(cfg.Keys); i += batch {
		end := min(i+batch, len(cfg.Keys))
		names := make([]string, 0, end-i)
		for _, k := range cfg.Keys[i:end] {
			names = append(names, k.Key)
		}
		got, err := cfg.Cache.Cached(ctx, names)
		if err != nil {
			return p, fmt.Errorf("warm: checking the cache: %w", err)
		}
		copy(cached[i:end], got)
	}
	for i, c := range cached {
		if c {
			hits += cfg.Keys[i].Count
		}
	}
	report()

	type result struct {
		i   int
		err error
	}
	results := make(chan result, cfg.Concurrency)
	sem := make(chan struct{}, cfg.Concurrency)
	interval := time.Duration(float64(time.Second) / cfg.Rate)
	next := time.Now()
	ticker := time.NewTicker(cfg.ReportEvery)
	defer ticker.Stop()
	inflight := 0
	collect := func(r result) {
		inflight--
		p.Done++
		switch {
		case r.err == nil:
			p.Loaded++
			hits += cfg.Keys[r.i].Count
		case errors.Is(r.err, ErrNotFound):
			p.NotFound++
		default:
			p.Failed++
		}
	}
	for i := 0; i < len(cfg.Keys); i++ {
		if cached[i] {
			p.Done++
			p.AlreadyCached++
			continue
		}
		// Pace the origin: one load per interval.
		for wait := time.Until(next); wait > 0; wait = time.Until(next) {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return p, ctx.Err()
			case r := <-results:
				collect(r)
			case <-ticker.C:
				report()
			case <-t.C:
			}
			t.Stop()
		}
		next = next.Add(interval)
		if now := time.Now(); next.Before(now.Add(-interval)) {
			next = now // do not burst to catch up after a stall
		}
		for done := false; !done; {
			select {
			case sem <- struct{}{}:
				done = true
			case r := <-results:
				collect(r)
			case <-ctx.Done():
				return p, ctx.Err()
			}
		}
		inflight++
		go func(i int) {
			defer func() { <-sem }()
			key := cfg.Keys[i].Key
			var err error
			if cfg.Get != nil {
				err = cfg.Get(ctx, key)
			} else {
				var v []byte
				if v, err = cfg.Load(ctx, key); err == nil {
					err = cfg.Cache.Fill(ctx, key, v)
				}
			}
			results <- result{i, err}
		}(i)
	}
	for inflight > 0 {
		select {
		case r := <-results:
			collect(r)
		case <-ticker.C:
			report()
		case <-ctx.Done():
			return p, ctx.Err()
		}
	}
	report()
	p.HitRate, p.Elapsed = rate(), time.Since(start)
	return p, nil
}
