package wheel

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

func signalled(w *Wheel) bool {
	select {
	case <-w.C():
		return true
	default:
		return false
	}
}

func ids(ds []Due) []int64 {
	out := make([]int64, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

func TestWheel(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := New(10*time.Millisecond, time.Second, t0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	if !w.Add(Due{1, ms(25)}) || !w.Add(Due{2, ms(30)}) || !w.Add(Due{3, ms(500)}) || w.Add(Due{4, ms(1500)}) {
		t.Fatal("Add: want in-span accepted, beyond-span refused")
	}
	if !w.Add(Due{1, ms(25)}) || w.Len() != 3 {
		t.Fatalf("a run added twice must be held once: %d held", w.Len())
	}
	if signalled(w) || len(w.Take(10)) != 0 {
		t.Fatal("signalled or ready before anything was due")
	}
	// Runs wake one slot after the boundary at or after them.
	if n := w.Advance(ms(30)); n != 0 || signalled(w) {
		t.Fatalf("at 30ms passed %d: 25ms and 30ms wake at 40ms, never early", n)
	}
	if n := w.Advance(ms(40)); n != 2 || !signalled(w) {
		t.Fatalf("at 40ms passed %d, want the 25ms and 30ms runs", n)
	}
	if got := ids(w.Take(1)); !slices.Equal(got, []int64{1}) {
		t.Fatalf("Take(1) = %v", got)
	}
	if got := ids(w.Take(10)); !slices.Equal(got, []int64{2}) || w.Len() != 1 {
		t.Fatalf("Take(10) = %v, %d left", got, w.Len())
	}
	// A taken run may be added again (its fire found it not yet due).
	if !w.Add(Due{1, ms(25)}) || !signalled(w) || !slices.Equal(ids(w.Take(10)), []int64{1}) {
		t.Fatal("a run already past must be ready at once")
	}
	if n := w.Advance(ms(505)); n != 0 {
		t.Fatalf("at 505ms passed %d", n)
	}
	if n := w.Advance(ms(510)); n != 1 || !signalled(w) || !slices.Equal(ids(w.Take(10)), []int64{3}) {
		t.Fatalf("at 510ms passed %d, want run 3", n)
	}
	// A clock jump past a whole revolution makes everything ready.
	w.Add(Due{5, ms(700)})
	w.Add(Due{6, ms(900)})
	if n := w.Advance(ms(5000)); n != 2 || !signalled(w) || len(w.Take(10)) != 2 || w.Len() != 0 {
		t.Fatalf("after a jump passed %d", n)
	}
	if !w.Add(Due{7, ms(5500)}) || w.Add(Due{8, ms(6100)}) {
		t.Fatal("span must follow the cursor after the jump")
	}
}

// TestRunWakesOnlyForHeldSlots: Run hands a run over once its slot has
// passed, never before, and wakes for that slot only: a run twenty
// resolutions ahead costs a few readings of its clock (start, the Add's
// wake-up, the slot), where ticking read it every resolution.
func TestRunWakesOnlyForHeldSlots(t *testing.T) {
	var reads atomic.Int64
	now := func() time.Time {
		reads.Add(1)
		return time.Now()
	}
	w := New(5*time.Millisecond, time.Second, time.Now())
	running(t, w, now)
	due := time.Now().Add(100 * time.Millisecond)
	if !w.Add(Due{1, due}) {
		t.Fatal("Add refused a run within the span")
	}
	handedOver(t, w, time.Now, 1, due)
	if n := reads.Load(); n > 8 {
		t.Errorf("read the clock %d times to hand over one run 20 resolutions ahead", n)
	}
}

// TestRunWakesForAnEarlierAdd: while Run waits for a later slot, an Add of
// an earlier one is handed over at its own slot, not the later one's; and
// an Add after the clock moved on by more than the span while the wheel
// slept (nothing to wake for) is placed by that clock, not refused.
func TestRunWakesForAnEarlierAdd(t *testing.T) {
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	w := New(5*time.Millisecond, time.Second, now())
	running(t, w, now)
	take := func(id int64, due time.Time) {
		t.Helper()
		handedOver(t, w, now, id, due)
	}
	later := now().Add(300 * time.Millisecond)
	if !w.Add(Due{1, later}) {
		t.Fatal("Add refused a run within the span")
	}
	sooner := now().Add(50 * time.Millisecond)
	if !w.Add(Due{2, sooner}) {
		t.Fatal("Add refused a run within the span")
	}
	take(2, sooner)
	if now().After(later) {
		t.Fatal("the earlier run was handed over only at the later one's slot")
	}
	take(1, later)

	offset.Store(int64(10 * time.Second)) // ten spans on, nothing held
	due := now().Add(50 * time.Millisecond)
	if !w.Add(Due{3, due}) {
		t.Fatal("Add refused a run 50 ms ahead after the clock moved on")
	}
	take(3, due)
}

// running runs w.Run with now until t ends.
func running(t *testing.T, w *Wheel, now func() time.Time) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx, now)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// handedOver waits for w to signal and checks that it hands over run id
// alone, not before due by now.
func handedOver(t *testing.T, w *Wheel, now func() time.Time, id int64, due time.Time) {
	t.Helper()
	select {
	case <-w.C():
	case <-time.After(10 * time.Second):
		t.Fatalf("run %d was never handed over", id)
	}
	if early := due.Sub(now()); early > 0 {
		t.Fatalf("run %d handed over %s before its slot", id, early)
	}
	if got := ids(w.Take(10)); !slices.Equal(got, []int64{id}) {
		t.Fatalf("Take = %v, want [%d]", got, id)
	}
}
