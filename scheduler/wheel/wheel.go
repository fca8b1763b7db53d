// Package wheel is a hashed timing wheel of instants at which runs fall
// due. A runner loads the next minutes of due instants of its shards into
// it (and adds the slots it chains as it fires), and the wheel wakes the
// runner when the cursor reaches a slot holding any, so runs fire within
// one resolution of their slot instead of up to a sweep tick late. The
// sweep stays as the safety net: an instant the wheel never heard of
// (created by another process, beyond the span, a clock step) is fired by
// the next sweep.
//
// Times are on the database clock: the caller passes the offset between
// it and the local clock.
package wheel

import (
	"context"
	"sync"
	"time"
)

// Wheel is safe for concurrent use.
type Wheel struct {
	res   time.Duration
	mu    sync.Mutex
	slots []int     // entries per slot
	base  time.Time // instant of the cursor's slot start
	cur   int
	c     chan struct{}
}

// New returns a wheel of span/res slots of res each, starting at now.
func New(res, span time.Duration, now time.Time) *Wheel {
	n := max(int(span/res), 1)
	return &Wheel{res: res, slots: make([]int, n), base: now.Truncate(res), c: make(chan struct{}, 1)}
}

// C receives (coalesced) when due entries were passed.
func (w *Wheel) C() <-chan struct{} { return w.c }

func (w *Wheel) signal() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// Add records an instant. One at or before the cursor signals at once;
// one beyond the span is refused (false): load it again later.
func (w *Wheel) Add(t time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := t.Sub(w.base)
	if d <= 0 {
		w.signal()
		return true
	}
	// One slot past the first boundary at or after t: waking there is not
	// early even when the clock estimate is off by up to a resolution.
	k := int((d+w.res-1)/w.res) + 1
	if k >= len(w.slots) {
		return false
	}
	w.slots[(w.cur+k)%len(w.slots)]++
	return true
}

// Advance moves the cursor to now, clearing the slots passed, signals if
// any held entries, and returns how many entries were passed.
func (w *Wheel) Advance(now time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	steps := int(now.Sub(w.base) / w.res)
	passed := 0
	for i := 0; i < steps && i <= len(w.slots); i++ {
		w.cur = (w.cur + 1) % len(w.slots)
		passed += w.slots[w.cur]
		w.slots[w.cur] = 0
	}
	if steps > 0 {
		w.base = w.base.Add(time.Duration(steps) * w.res)
	}
	if passed > 0 {
		w.signal()
	}
	return passed
}

// Run advances the wheel every resolution by now() (the database clock
// estimate) until ctx is done.
func (w *Wheel) Run(ctx context.Context, now func() time.Time) {
	t := time.NewTicker(w.res)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.Advance(now())
		}
	}
}
