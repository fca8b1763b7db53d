package namespace

import (
	"sync"
	"sync/atomic"
)

// bucket is a token bucket with a one-second burst. Requests are admitted
// while the balance is positive and then charged in full, so one large
// request can put the bucket in debt and hold back the ones after it. That
// is what makes a bandwidth limit hold for values of any size.
type bucket struct {
	mu     sync.Mutex
	on     atomic.Bool // rate > 0: lets unlimited namespaces skip the mutex
	rate   float64     // tokens per second; 0 = unlimited
	tokens float64
	last   int64 // unix ms
}

func (b *bucket) setRate(r float64) {
	b.mu.Lock()
	if b.rate != r {
		b.rate, b.tokens = r, r
	}
	b.on.Store(r > 0)
	b.mu.Unlock()
}

func (b *bucket) refill(now int64) {
	if b.last == 0 {
		b.last = now
		b.tokens = b.rate
	}
	if dt := now - b.last; dt > 0 {
		b.tokens = min(b.rate, b.tokens+b.rate*float64(dt)/1000)
		b.last = now
	}
}

// take admits a request of n tokens at now (unix ms) if the balance is positive.
func (b *bucket) take(n float64, now int64) bool {
	if !b.on.Load() {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rate == 0 {
		return true
	}
	b.refill(now)
	if b.tokens <= 0 {
		return false
	}
	b.tokens -= n
	return true
}

// charge spends n tokens unconditionally (reply bytes, known only after).
func (b *bucket) charge(n float64, now int64) {
	if !b.on.Load() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rate == 0 {
		return
	}
	b.refill(now)
	b.tokens -= n
}
