package bucket

import (
	"context"
	"sync"
	"time"
)

// Memory is the in-process store: the same semantics as Redis, for one
// process. It is safe for concurrent use; one mutex makes each Check atomic
// (sharded locks are a later optimisation).
type Memory struct {
	// Now is the clock (default time.Now); tests inject one.
	Now func() time.Time

	mu      sync.Mutex
	buckets map[string]*memEntry
	ops     int
}

type memEntry struct {
	s       state
	expires int64 // ms
}

// sweepEvery is how many checks pass between sweeps of expired buckets.
const sweepEvery = 4096

// NewMemory returns an empty store.
func NewMemory() *Memory { return &Memory{Now: time.Now, buckets: map[string]*memEntry{}} }

// Check decides items atomically; it never fails.
func (m *Memory) Check(_ context.Context, items []Item) (Decision, error) {
	now := m.Now().UnixMilli()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ops++
	if m.ops%sweepEvery == 0 {
		for k, e := range m.buckets {
			if e.expires <= now {
				delete(m.buckets, k)
			}
		}
	}
	type calc struct {
		allowed   bool
		pre, post Result
		next      state
	}
	cs := make([]calc, len(items))
	commit := true
	for i, it := range items {
		var s state
		if e := m.buckets[it.Key]; e != nil && e.expires > now {
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
			m.buckets[it.Key] = &memEntry{s: c.next, expires: now + ttl(it, now).Milliseconds()}
			d.Results[i] = c.post
		} else {
			d.Results[i] = c.pre
		}
	}
	return d, nil
}
