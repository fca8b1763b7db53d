package wheel

import (
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

func TestWheel(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := New(10*time.Millisecond, time.Second, t0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	if !w.Add(ms(25)) || !w.Add(ms(30)) || !w.Add(ms(500)) || w.Add(ms(1500)) {
		t.Fatal("Add: want in-span accepted, beyond-span refused")
	}
	if signalled(w) {
		t.Fatal("signalled before anything was due")
	}
	// Entries wake one slot after the boundary at or after them.
	if n := w.Advance(ms(30)); n != 0 || signalled(w) {
		t.Fatalf("at 30ms passed %d: 25ms and 30ms wake at 40ms, never early", n)
	}
	if n := w.Advance(ms(40)); n != 2 || !signalled(w) {
		t.Fatalf("at 40ms passed %d, want the 25ms and 30ms entries", n)
	}
	if n := w.Advance(ms(505)); n != 0 {
		t.Fatalf("at 505ms passed %d", n)
	}
	if n := w.Advance(ms(510)); n != 1 || !signalled(w) {
		t.Fatalf("at 510ms passed %d, want 1", n)
	}
	if !w.Add(ms(100)) || !signalled(w) {
		t.Fatal("an instant already past must signal at once")
	}
	// A clock jump past a whole revolution clears everything and signals.
	w.Add(ms(700))
	if n := w.Advance(ms(5000)); n != 1 || !signalled(w) {
		t.Fatalf("after a jump passed %d", n)
	}
	if !w.Add(ms(5500)) || w.Add(ms(6100)) {
		t.Fatal("span must follow the cursor after the jump")
	}
}
