package expire

import (
	"testing"
	"time"
)

// fakeTarget has per-shard counts of expired and live volatile keys.
type fakeTarget struct {
	expired []int
	live    []int
	calls   int
}

func (f *fakeTarget) NumShards() int { return len(f.expired) }

func (f *fakeTarget) ExpireSample(shard, n int) (sampled, expired int) {
	f.calls++
	total := f.expired[shard] + f.live[shard]
	sampled = min(n, total)
	// Sample proportionally, as random sampling would on average.
	if total > 0 {
		expired = min(f.expired[shard], sampled*f.expired[shard]/total+1)
	}
	f.expired[shard] -= expired
	return sampled, expired
}

func TestCycleRepeatsWhileExpiredFractionHigh(t *testing.T) {
	f := &fakeTarget{expired: []int{1000, 0}, live: []int{10, 500}}
	c := New(Config{Targets: func() []Target { return []Target{f} }, Budget: time.Hour})
	st := c.Cycle()
	if f.expired[0] > 100 {
		t.Fatalf("a mostly-expired shard kept %d expired keys after one cycle", f.expired[0])
	}
	if st.Expired < 900 || st.TimedOut {
		t.Fatalf("stats = %+v", st)
	}
	// A shard with nothing expired is sampled once per cycle, not repeatedly.
	before := f.calls
	c.Cycle()
	if f.calls-before > 2+f.expired[0]/10 {
		t.Fatalf("idle shards sampled %d times in one cycle", f.calls-before)
	}
}

func TestCycleStopsAtBudgetAndResumes(t *testing.T) {
	f := &fakeTarget{expired: make([]int, 8), live: make([]int, 8)}
	for i := range f.expired {
		f.expired[i] = 100
	}
	var now time.Time
	c := New(Config{
		Targets: func() []Target { return []Target{f} },
		Budget:  10 * time.Millisecond,
		// Every clock read advances 3 ms: the budget ends a cycle after a few samples.
		Now: func() time.Time { now = now.Add(3 * time.Millisecond); return now },
	})
	st := c.Cycle()
	if !st.TimedOut {
		t.Fatal("cycle did not stop at its budget")
	}
	for range 100 {
		c.Cycle()
	}
	for i, e := range f.expired {
		if e != 0 {
			t.Fatalf("shard %d still has %d expired keys: cycles do not resume where they stopped", i, e)
		}
	}
}
