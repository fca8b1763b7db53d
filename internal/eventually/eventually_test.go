package eventually

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the failure and ends the
// goroutine, as t.Fatalf does, without failing the real test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// failure runs f on a goroutine of its own with a recorder and returns
// what it failed with ("" when it did not).
func failure(t *testing.T, f func(tb testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.failed
}

func TestTrueWaitsForTheCondition(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 3 {
			n.Add(1)
		}
	}()
	if f := failure(t, func(tb testing.TB) {
		True(tb, 5*time.Second, "three increments", func() bool { return n.Load() == 3 })
	}); f != "" {
		t.Fatalf("failed: %s", f)
	}
}

func TestTrueFailsNamingWhatItWaitedFor(t *testing.T) {
	calls := 0
	f := failure(t, func(tb testing.TB) {
		True(tb, 30*time.Millisecond, "the impossible", func() bool { calls++; return false })
	})
	if want := "timed out after 30ms waiting for the impossible"; f != want {
		t.Fatalf("failure %q, want %q", f, want)
	}
	if calls < 2 {
		t.Fatalf("cond checked %d times, want a poll", calls)
	}
}

func TestWithinChecksOnceMoreAtTheDeadline(t *testing.T) {
	start := time.Now()
	calls := 0
	// Holds only once the deadline has passed: Within's last check sees it.
	ok := Within(20*time.Millisecond, func() bool { calls++; return time.Since(start) >= 20*time.Millisecond })
	if !ok {
		t.Fatalf("Within = false after %d checks, want true from the last check", calls)
	}
}

func TestAlwaysFailsWhenTheConditionBreaks(t *testing.T) {
	calls := 0
	if f := failure(t, func(tb testing.TB) {
		Always(tb, 5*time.Second, "the invariant", func() bool { calls++; return calls < 3 })
	}); f != "the invariant stopped holding" || calls != 3 {
		t.Fatalf("failure %q after %d checks, want it at the third", f, calls)
	}
	if f := failure(t, func(tb testing.TB) {
		Always(tb, 30*time.Millisecond, "the invariant", func() bool { return true })
	}); f != "" {
		t.Fatalf("failed: %s", f)
	}
}
