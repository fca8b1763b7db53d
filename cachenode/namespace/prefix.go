package namespace

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

var latencyBounds = [...]float64{5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 10e-3, 50e-3}

// LatencyBuckets are the upper bounds, in seconds, of every command latency
// histogram of a node (per namespace and per key prefix).
var LatencyBuckets = latencyBounds[:]

// Histogram is a lock-free latency histogram over LatencyBuckets.
type Histogram struct {
	counts [len(latencyBounds) + 1]atomic.Uint64 // the last is +Inf
	sumNs  atomic.Int64
}

// Observe records one latency.
func (h *Histogram) Observe(d time.Duration) {
	s := d.Seconds()
	i := 0
	for i < len(latencyBounds) && s > latencyBounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
}

// Snapshot returns the number of observations, their sum in seconds and
// the cumulative count per bucket upper bound (Prometheus's layout).
func (h *Histogram) Snapshot() (count uint64, sum float64, buckets map[float64]uint64) {
	buckets = make(map[float64]uint64, len(latencyBounds))
	for i, ub := range latencyBounds {
		count += h.counts[i].Load()
		buckets[ub] = count
	}
	count += h.counts[len(latencyBounds)].Load()
	return count, float64(h.sumNs.Load()) / 1e9, buckets
}

// PrefixCounters are the counters of one key prefix. Memory is the bytes
// accounted to the prefix's keys (it sums to the namespace's used memory
// over all prefixes); Latency samples the commands whose first key has
// the prefix (one command in 8, as the namespace's histogram).
type PrefixCounters struct {
	Ops, Hits, Misses, Evictions, Expirations, Memory atomic.Int64
	Latency                                           Histogram
}

// prefixTable counts by key prefix under one scheme (depth, separator,
// bound). It is also the namespace DB's keyspace.Ledger, which keeps
// Memory, Evictions and Expirations exact.
type prefixTable struct {
	depth int
	sep   string
	max   int

	// m is replaced, never changed (copy on insert): lookups take no lock.
	// It holds at most max prefixes plus OtherPrefix.
	m  atomic.Pointer[map[string]*PrefixCounters]
	mu sync.Mutex
}

func newPrefixTable(s *Settings) *prefixTable {
	if s.PrefixDepth <= 0 {
		return nil
	}
	t := &prefixTable{depth: s.PrefixDepth, sep: s.PrefixSeparator, max: s.MaxPrefixes}
	t.m.Store(&map[string]*PrefixCounters{})
	return t
}

// sameScheme reports whether s counts prefixes as t does.
func (t *prefixTable) sameScheme(s *Settings) bool {
	if t == nil {
		return s.PrefixDepth <= 0
	}
	return t.depth == s.PrefixDepth && t.sep == s.PrefixSeparator && t.max == s.MaxPrefixes
}

// of returns key's counters: its prefix's, or OtherPrefix's once the table
// is full. A prefix keeps the counters it first got (the table never
// shrinks), so a key's bytes are always charged to and released from the
// same counters.
func (t *prefixTable) of(key string) *PrefixCounters {
	end, seg := len(key), 0
	for i := 0; i+len(t.sep) <= len(key); i++ {
		if key[i:i+len(t.sep)] == t.sep {
			if seg++; seg == t.depth {
				end = i
				break
			}
		}
	}
	p := key[:end]
	if c := (*t.m.Load())[p]; c != nil {
		return c
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := *t.m.Load()
	if c := cur[p]; c != nil {
		return c
	}
	name := p
	if len(cur) >= t.max {
		name = OtherPrefix
		if c := cur[name]; c != nil {
			return c
		}
	}
	next := make(map[string]*PrefixCounters, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	c := &PrefixCounters{}
	next[strings.Clone(name)] = c // key may alias a caller's buffer
	t.m.Store(&next)
	return c
}

func (t *prefixTable) Sized(key string, delta int64) { t.of(key).Memory.Add(delta) }
func (t *prefixTable) Expired(key string)            { t.of(key).Expirations.Add(1) }
func (t *prefixTable) Evicted(key string)            { t.of(key).Evictions.Add(1) }

// Prefix returns the counters of key's prefix, or nil when per-prefix
// counting is off.
func (n *Namespace) Prefix(key []byte) *PrefixCounters {
	t := n.prefixes.Load()
	if t == nil {
		return nil
	}
	return t.of(unsafeString(key))
}

// Prefixes returns the per-prefix counters (nil when counting is off); the
// map must not be changed.
func (n *Namespace) Prefixes() map[string]*PrefixCounters {
	t := n.prefixes.Load()
	if t == nil {
		return nil
	}
	return *t.m.Load()
}

// setPrefixScheme installs s's prefix scheme when it differs from the one
// in use. The new table starts with every key's bytes (the DB hands it
// over shard by shard under the shard locks), and ops, hits and misses
// start from zero: the prefixes themselves may have changed.
func (n *Namespace) setPrefixScheme(s *Settings) {
	cur := n.prefixes.Load()
	if cur.sameScheme(s) {
		return
	}
	t := newPrefixTable(s)
	if t == nil {
		n.DB.SetLedger(nil)
	} else {
		n.DB.SetLedger(t)
	}
	n.prefixes.Store(t)
}

func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
