package namespace

import (
	"fmt"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode/evict"
	"github.com/portico-io/portico/cachenode/keyspace"
)

func set(db *keyspace.DB, key string, n int, expireAt int64) {
	var tx keyspace.Txn
	k := []byte(key)
	db.Begin(&tx, [][]byte{k})
	tx.SetString(k, make([]byte, n), expireAt)
	tx.End()
}

func memory(ps map[string]*PrefixCounters) (sum int64) {
	for _, c := range ps {
		sum += c.Memory.Load()
	}
	return sum
}

// TestPrefixMemoryAndRemovals: per-prefix memory sums to the namespace's,
// expirations and evictions land on the key's own prefix, and a reload
// that changes the prefix scheme recounts memory under the new one.
func TestPrefixMemoryAndRemovals(t *testing.T) {
	now := int64(1_000_000)
	r := NewRegistry(RegistryConfig{Shards: 8, Now: func() int64 { return now }})
	s := Settings{Name: "a", PrefixDepth: 1, Policy: evict.AllKeysLRU}
	if err := r.Apply([]Settings{s}); err != nil {
		t.Fatal(err)
	}
	a, _ := r.Get("a")
	for i := range 20 {
		set(a.DB, fmt.Sprintf("user:%d:name", i), 100, 0)
		set(a.DB, fmt.Sprintf("session:%d", i), 50, now+1000)
	}
	ps := a.Prefixes()
	if got := memory(ps); got != a.DB.Used() || ps["user"].Memory.Load() <= ps["session"].Memory.Load() {
		t.Fatalf("prefix memory %d (user %d, session %d), namespace %d",
			got, ps["user"].Memory.Load(), ps["session"].Memory.Load(), a.DB.Used())
	}
	now += 1000
	for i := 0; i < a.DB.NumShards(); i++ {
		a.DB.ExpireSample(i, 100)
	}
	if got := ps["session"]; got.Expirations.Load() != 20 || got.Memory.Load() != 0 {
		t.Fatalf("session: %d expirations, %d bytes after every session expired", got.Expirations.Load(), got.Memory.Load())
	}
	a.DB.EvictOne(5)
	if ps["user"].Evictions.Load() != 1 || ps["session"].Evictions.Load() != 0 {
		t.Fatalf("evictions: user %d, session %d", ps["user"].Evictions.Load(), ps["session"].Evictions.Load())
	}

	// Depth 2 on reload: user:N becomes its own prefix, up to MaxPrefixes.
	s.PrefixDepth, s.MaxPrefixes = 2, 5
	if err := r.Apply([]Settings{s}); err != nil {
		t.Fatal(err)
	}
	ps = a.Prefixes()
	if len(ps) != 6 || ps[OtherPrefix] == nil || memory(ps) != a.DB.Used() {
		t.Fatalf("after reload: %d prefixes, memory %d of %d", len(ps), memory(ps), a.DB.Used())
	}
	if a.Prefix([]byte("user:3:x")) == a.Prefix([]byte("user:4:x")) && a.Prefix([]byte("user:4:x")) != ps[OtherPrefix] {
		t.Fatal("depth 2 did not split user:N")
	}
	s.PrefixDepth = 0
	if err := r.Apply([]Settings{s}); err != nil {
		t.Fatal(err)
	}
	if a.Prefixes() != nil || a.Prefix([]byte("user:1")) != nil {
		t.Fatal("prefix counting still on at depth 0")
	}
	set(a.DB, "user:1:name", 10, 0) // no ledger left: must not panic
}

func TestPrefixLatencyHistogram(t *testing.T) {
	var h Histogram
	for _, d := range []time.Duration{3 * time.Microsecond, 7 * time.Microsecond, 2 * time.Millisecond, time.Second} {
		h.Observe(d)
	}
	count, sum, b := h.Snapshot()
	if count != 4 || b[5e-6] != 1 || b[10e-6] != 2 || b[2.5e-3] != 3 || b[50e-3] != 3 {
		t.Fatalf("count %d, buckets %v", count, b)
	}
	if sum < 1.002 || sum > 1.0021 {
		t.Fatalf("sum %v", sum)
	}
}

func TestReloadChangesHotKeySampling(t *testing.T) {
	r := NewRegistry(RegistryConfig{Shards: 4})
	if err := r.Apply([]Settings{{Name: "a", HotKeySampleEvery: 1}}); err != nil {
		t.Fatal(err)
	}
	a, _ := r.Get("a")
	a.Hot.Observe([]byte("k"))
	if err := r.Apply([]Settings{{Name: "a", HotKeySampleEvery: 50}}); err != nil {
		t.Fatal(err)
	}
	if a.Hot.SampleEvery() != 50 || len(a.Hot.Top()) != 0 {
		t.Fatalf("after reload: every %d, top %v", a.Hot.SampleEvery(), a.Hot.Top())
	}
}
