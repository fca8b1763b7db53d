// Package eventually waits in tests for a condition another goroutine or
// process brings about, polling it instead of sleeping for a guessed time:
// a test waits exactly as long as the system takes, and fails with what it
// was waiting for when the system takes too long.
package eventually

import (
	"testing"
	"time"
)

// Interval is how often a condition is re-checked.
const Interval = 10 * time.Millisecond

// True polls cond every Interval until it holds, failing the test after d
// with "timed out after d waiting for what". cond runs on the test's
// goroutine, so it may call t.Fatal.
func True(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(d, cond) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// Within polls cond every Interval until it holds (true) or d passes
// (false, after one last check), for callers that report the failure
// themselves.
func Within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for !cond() {
		if !time.Now().Before(deadline) {
			return cond()
		}
		<-tick.C
	}
	return true
}

// Always polls cond every Interval for d and fails the test the first time
// it does not hold: for "nothing happens" checks that have no event to wait
// for (a NACKed version not being re-sent, say). Prefer waiting for a pass
// hook where the component has one: it says when the thing that must not
// happen had its chance.
func Always(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		if !cond() {
			t.Fatalf("%s stopped holding", what)
		}
		<-tick.C
	}
}
