// Package samples keeps a node's recent sampled key accesses: the key
// sample stream (1 access in N per namespace, the hot-key tracker's
// sampling) in a bounded ring, read with CACHE SAMPLES. It is what the
// warmer (cachectl warm) replays after a cold start: collected before the
// restart, it names the keys worth loading first.
package samples

import (
	"sync"
	"time"
)

// MaxKey bounds a stored key's length (longer keys are not kept: a warmer
// cannot replay a truncated key).
const MaxKey = 512

// Sample is one sampled access.
type Sample struct {
	NS  string
	Key string
	At  int64 // unix ms
}

// Ring holds the last Size samples. Safe for concurrent use; Add takes a
// mutex for a copy, so it may run inside the sampler's lock.
type Ring struct {
	mu   sync.Mutex
	buf  []Sample
	next int
	full bool
	now  func() int64
}

// New returns a ring of size samples (size ≤ 0: 65536).
func New(size int, now func() int64) *Ring {
	if size <= 0 {
		size = 65536
	}
	if now == nil {
		now = func() int64 { return time.Now().UnixMilli() }
	}
	return &Ring{buf: make([]Sample, size), now: now}
}

// Add records a sampled access to key in namespace ns.
func (r *Ring) Add(ns, key string) {
	if len(key) > MaxKey {
		return
	}
	at := r.now()
	r.mu.Lock()
	r.buf[r.next] = Sample{NS: ns, Key: key, At: at}
	r.next++
	if r.next == len(r.buf) {
		r.next, r.full = 0, true
	}
	r.mu.Unlock()
}

// Recent returns up to n of the newest samples, oldest first, of namespace
// ns (all namespaces when ns is "").
func (r *Ring) Recent(n int, ns string) []Sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	size := r.next
	if r.full {
		size = len(r.buf)
	}
	var out []Sample
	for i := 1; i <= size && len(out) < n; i++ {
		s := r.buf[(r.next-i+len(r.buf))%len(r.buf)]
		if ns == "" || s.NS == ns {
			out = append(out, s)
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}
