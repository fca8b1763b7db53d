package service

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/portico-io/portico/ratelimitsvc/bucket"
)

// leases hold tokens that this replica took from the shared store in
// batches for highVolume rules (token leasing), so most requests on a hot
// key are decided here without a store call. Tokens held in leases are
// already consumed in the store, so the fleet never admits more than the
// store would; what leasing costs is staleness, bounded by replicas × batch
// (a fixed window's lease dies with its window; a token bucket's lease
// never holds more than one batch). A lease also remembers when the store
// last said the bucket cannot pay, and denies locally until then: the
// pre-filter that keeps rejected traffic off the store.
//
// All methods are safe for concurrent use.
type leases struct {
	now func() time.Time
	m   sync.Map // bucket key -> *lease
	ops atomic.Uint64
}

type lease struct {
	mu   sync.Mutex
	held uint64
	// expires voids held tokens (ms; 0 = never): a fixed window's lease
	// ends with the window it was taken from.
	expires int64
	// deniedUntil (ms): the store said the bucket cannot pay the cost
	// before then.
	deniedUntil int64
	resetAt     int64 // ms, from the last store reply
	// refill is closed when the batch request in flight (one at a time)
	// is settled; nil when none is.
	refill   chan struct{}
	lastUsed int64 // ms
}

// leaseIdle is how long an unused lease is kept; its held tokens are then
// forgotten (they were consumed in the store: the cost is under-admission).
const leaseIdle = time.Minute

// batchFor is ≈1% of the limit per window, at least 1.
func batchFor(it bucket.Item) uint64 { return max(1, it.Limit/100) }

func (l *leases) get(key string, now int64) *lease {
	if n := l.ops.Add(1); n%4096 == 0 {
		l.m.Range(func(k, v any) bool {
			le := v.(*lease)
			le.mu.Lock()
			idle := le.refill == nil && le.lastUsed < now-leaseIdle.Milliseconds()
			le.mu.Unlock()
			if idle {
				l.m.Delete(k)
			}
			return true
		})
	}
	if v, ok := l.m.Load(key); ok {
		return v.(*lease)
	}
	v, _ := l.m.LoadOrStore(key, &lease{})
	return v.(*lease)
}

// try decides the request from leases alone when it can: some leased item
// is known to be unpayable (deny, nothing spent), or every item is leased
// and every lease covers its cost (allow, spent locally). Otherwise it
// returns done=false and has spent nothing.
func (l *leases) try(items []bucket.Item, hv []bool) (dec bucket.Decision, done bool) {
	now := l.now().UnixMilli()
	ls := make([]*lease, len(items))
	all := true
	for i, it := range items {
		if !hv[i] {
			all = false
			continue
		}
		ls[i] = l.get(it.Key, now)
	}
	res := make([]bucket.Result, len(items))
	for i, le := range ls {
		if le == nil {
			continue
		}
		le.mu.Lock()
		le.lastUsed = now
		denied, retry, reset := le.deniedUntil > now, le.deniedUntil-now, max(0, le.resetAt-now)
		le.mu.Unlock()
		if denied {
			res[i] = bucket.Result{RetryAfter: time.Duration(retry) * time.Millisecond, ResetAfter: time.Duration(reset) * time.Millisecond}
			for j := range res {
				if j != i {
					res[j] = bucket.Result{Allowed: true}
				}
			}
			return bucket.Decision{Results: res}, true
		}
	}
	if !all {
		return bucket.Decision{}, false
	}
	for i, le := range ls {
		le.mu.Lock()
		if le.expires != 0 && le.expires <= now {
			le.held, le.expires = 0, 0
		}
		ok := le.held >= items[i].Cost
		if ok {
			le.held -= items[i].Cost
			res[i] = bucket.Result{Allowed: true, Remaining: le.held, ResetAfter: time.Duration(max(0, le.resetAt-now)) * time.Millisecond}
		}
		le.mu.Unlock()
		if !ok {
			for j := range i { // give back what was spent
				ls[j].mu.Lock()
				ls[j].held += items[j].Cost
				ls[j].mu.Unlock()
			}
			return bucket.Decision{}, false
		}
	}
	return bucket.Decision{Committed: true, Results: res}, true
}

// inflight returns the refill in flight of a leased item that cannot pay
// its cost, or nil: a request may wait for it (bounded by the store
// timeout) rather than call the store itself.
func (l *leases) inflight(items []bucket.Item, hv []bool) <-chan struct{} {
	now := l.now().UnixMilli()
	for i := range items {
		if !hv[i] {
			continue
		}
		le := l.get(items[i].Key, now)
		le.mu.Lock()
		ch := le.refill
		short := le.held < items[i].Cost
		le.mu.Unlock()
		if ch != nil && short {
			return ch
		}
	}
	return nil
}

// prepare sets Lease on the leased items whose lease has no batch request
// in flight, asking the store for enough to refill to one batch; it
// returns those leases, which settle must be called with.
func (l *leases) prepare(items []bucket.Item, hv []bool) []*lease {
	now := l.now().UnixMilli()
	owned := make([]*lease, len(items))
	for i := range items {
		if !hv[i] {
			continue
		}
		le := l.get(items[i].Key, now)
		le.mu.Lock()
		if le.refill == nil {
			le.refill = make(chan struct{})
			owned[i] = le
			if b := batchFor(items[i]); le.held < b {
				items[i].Lease = b - le.held
			}
		}
		le.mu.Unlock()
	}
	return owned
}

// settle records the store's answer (dec is ignored when err is set).
func (l *leases) settle(items []bucket.Item, hv []bool, owned []*lease, dec bucket.Decision, err error) {
	now := l.now().UnixMilli()
	for i, it := range items {
		if !hv[i] {
			continue
		}
		le := owned[i]
		if le == nil {
			if err != nil || dec.Results[i].Allowed {
				continue
			}
			le = l.get(it.Key, now)
		}
		le.mu.Lock()
		if owned[i] != nil {
			close(le.refill)
			le.refill = nil
		}
		if err == nil {
			r := dec.Results[i]
			le.resetAt = now + r.ResetAfter.Milliseconds()
			switch {
			case !r.Allowed:
				le.deniedUntil = now + r.RetryAfter.Milliseconds()
			case dec.Committed && r.Leased > 0:
				if le.expires != 0 && le.expires <= now {
					le.held = 0
				}
				le.held += r.Leased
				le.expires = 0
				switch it.Kind {
				case bucket.FixedWindow:
					le.expires = now + r.ResetAfter.Milliseconds()
				case bucket.SlidingWindow:
					// Leased requests were counted in this window; spent
					// after it ends they would not be, so the lease ends with
					// the window (aligned to the epoch, as the store's are).
					win := it.Window.Milliseconds()
					le.expires = (now/win + 1) * win
				}
			}
		}
		le.mu.Unlock()
	}
}
