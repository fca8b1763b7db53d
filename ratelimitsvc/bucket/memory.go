package bucket

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"time"
)

// Memory is the in-process store: the same semantics as Redis, for one
// process. It is safe for concurrent use. Buckets live in lock-striped
// shards; a Check locks the shards of its items in ascending order (so two
// Checks never deadlock) and holds them while it decides, which keeps each
// Check atomic while requests on unrelated keys proceed in parallel.
type Memory struct {
	// Now is the clock (default time.Now); tests inject one.
	Now func() time.Time

	seed   maphash.Seed
	shards [memShards]memShard
}

const memShards = 64

type memShard struct {
	mu      sync.Mutex
	buckets map[string]*memEntry
	ops     int
	_       [40]byte // keep hot shards on separate cache lines
}

type memEntry struct {
	s       state
	expires int64 // ms
}

// sweepEvery is how many checks of a shard pass between sweeps of its
// expired buckets.
const sweepEvery = 4096

// NewMemory returns an empty store.
func NewMemory() *Memory {
	m := &Memory{Now: time.Now, seed: maphash.MakeSeed()}
	for i := range m.shards {
		m.shards[i].buckets = map[string]*memEntry{}
	}
	return m
}

func (m *Memory) shardOf(key string) int {
	return int(maphash.String(m.seed, key) % memShards)
}

// Check decides items atomically; it never fails.
func (m *Memory) Check(_ context.Context, items []Item) (Decision, error) {
	now := m.Now().UnixMilli()
	var one [1]int
	idx := one[:0]
	for _, it := range items {
		idx = append(idx, m.shardOf(it.Key))
	}
	locks := slices.Clone(idx)
	slices.Sort(locks)
	locks = slices.Compact(locks)
	for _, i := range locks {
		sh := &m.shards[i]
		sh.mu.Lock()
		sh.ops++
		if sh.ops%sweepEvery == 0 {
			for k, e := range sh.buckets {
				if e.expires <= now {
					delete(sh.buckets, k)
				}
			}
		}
	}
	defer func() {
		for _, i := range locks {
			m.shards[i].mu.Unlock()
		}
	}()
	type calc struct {
		allowed   bool
		pre, post Result
		next      state
	}
	cs := make([]calc, len(items))
	commit := true
	for i, it := range items {
		var s state
		if e := m.shards[idx[i]].buckets[it.Key]; e != nil && e.expires > now {
			s = e.s
		}
		c := &cs[i]
		c.allowed, c.pre, c.post, c.next = eval(it, s, now)
		if !c.allowed && it.Veto {
			commit = false
		}
	}
	d := Decision{Committed: commit, Results: make([]Result, len(items))}
	for i, it := range items {
		c := cs[i]
		if commit && c.allowed {
			m.shards[idx[i]].buckets[it.Key] = &memEntry{s: c.next, expires: now + ttl(it, now).Milliseconds()}
			d.Results[i] = c.post
		} else {
			d.Results[i] = c.pre
		}
	}
	return d, nil
}
