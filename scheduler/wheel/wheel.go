// Package wheel is a hashed timing wheel of runs waiting for their slot.
// A runner loads the next minutes of due runs of its shards into it (and
// adds the runs it chains as it fires), and the wheel hands them back
// when the cursor passes their slot, so they fire within one resolution
// of it, by primary key, instead of up to a sweep tick late after a scan.
// The sweep stays as the safety net: a run the wheel never heard of
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

// Due is a run and its slot.
type Due struct {
	ID int64
	At time.Time
}

// Wheel is safe for concurrent use.
type Wheel struct {
	res     time.Duration
	mu      sync.Mutex
	slots   [][]Due
	base    time.Time // instant of the cursor's slot start
	cur     int
	known   map[int64]struct{} // ids in a slot or ready
	ready   []Due              // passed, not yet taken
	pending int                // runs in slots
	c       chan struct{}
	// While Run runs: its clock (Add advances to it first, as the
	// cursor may have stood still), when it wakes next (zero: not
	// before an Add) and its wake-up for an Add of an earlier slot.
	now    func() time.Time
	wakeAt time.Time
	kick   chan struct{}
}

// New returns a wheel of span/res slots of res each, starting at now.
func New(res, span time.Duration, now time.Time) *Wheel {
	n := max(int(span/res), 1)
	return &Wheel{res: res, slots: make([][]Due, n), base: now.Truncate(res), known: map[int64]struct{}{},
		c: make(chan struct{}, 1), kick: make(chan struct{}, 1)}
}

// C receives (coalesced) when runs are ready to be taken.
func (w *Wheel) C() <-chan struct{} { return w.c }

func (w *Wheel) signal() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

// Add records a run. A run already held is ignored (loads overlap); one
// at or before the cursor is ready at once (and signals); one beyond the
// span is refused (false): load it again later.
func (w *Wheel) Add(d Due) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.now != nil {
		w.advance(w.now())
	}
	if _, ok := w.known[d.ID]; ok {
		return true
	}
	delta := d.At.Sub(w.base)
	if delta <= 0 {
		w.known[d.ID] = struct{}{}
		w.ready = append(w.ready, d)
		w.signal()
		return true
	}
	// One slot past the first boundary at or after At: waking there is
	// not early even when the clock estimate is off by up to a resolution.
	k := int((delta+w.res-1)/w.res) + 1
	if k >= len(w.slots) {
		return false
	}
	w.known[d.ID] = struct{}{}
	i := (w.cur + k) % len(w.slots)
	w.slots[i] = append(w.slots[i], d)
	w.pending++
	if at := w.base.Add(time.Duration(k) * w.res); w.now != nil && (w.wakeAt.IsZero() || at.Before(w.wakeAt)) {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	return true
}

// Advance moves the cursor to now, making the runs of the slots passed
// ready, signals if there were any, and returns how many.
func (w *Wheel) Advance(now time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.advance(now)
}

func (w *Wheel) advance(now time.Time) int {
	steps := int(now.Sub(w.base) / w.res)
	passed := 0
	for i := 0; i < steps && i <= len(w.slots); i++ {
		w.cur = (w.cur + 1) % len(w.slots)
		passed += len(w.slots[w.cur])
		w.ready = append(w.ready, w.slots[w.cur]...)
		w.slots[w.cur] = nil
	}
	if steps > 0 {
		w.base = w.base.Add(time.Duration(steps) * w.res)
	}
	if passed > 0 {
		w.pending -= passed
		w.signal()
	}
	return passed
}

// next returns when the cursor passes the earliest slot holding runs
// (false: none does).
func (w *Wheel) next() (time.Time, bool) {
	if w.pending == 0 {
		return time.Time{}, false
	}
	for k := 1; k < len(w.slots); k++ {
		if len(w.slots[(w.cur+k)%len(w.slots)]) > 0 {
			return w.base.Add(time.Duration(k) * w.res), true
		}
	}
	return time.Time{}, false // unreachable while pending counts right
}

// Take removes and returns up to n ready runs, in the order they became
// ready.
func (w *Wheel) Take(n int) []Due {
	w.mu.Lock()
	defer w.mu.Unlock()
	n = min(n, len(w.ready))
	out := make([]Due, n)
	copy(out, w.ready)
	w.ready = w.ready[n:]
	if len(w.ready) == 0 {
		w.ready = nil // let the backing array go
	}
	for _, d := range out {
		delete(w.known, d.ID)
	}
	return out
}

// Len returns how many runs the wheel holds, ready or not.
func (w *Wheel) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.known)
}

// Run advances the wheel by now() (the database clock estimate) until ctx
// is done: whenever the cursor passes a slot holding runs, and not
// between — an idle wheel does not wake at all (it ticked every
// resolution, ~50 wake-ups a second a process for nothing). An Add of an
// earlier slot than the one it waits for wakes it to wait less.
func (w *Wheel) Run(ctx context.Context, now func() time.Time) {
	w.mu.Lock()
	w.now = now
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.now, w.wakeAt = nil, time.Time{}
		w.mu.Unlock()
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		w.mu.Lock()
		t := now()
		w.advance(t)
		at, ok := w.next()
		w.wakeAt = at
		w.mu.Unlock()
		var fire <-chan time.Time
		if ok {
			timer.Reset(max(at.Sub(t), 0))
			fire = timer.C
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-fire:
		case <-w.kick:
		}
	}
}
