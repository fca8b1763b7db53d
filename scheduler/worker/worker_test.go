package worker

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/eventually"
	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/metrics"
	"github.com/portico-io/portico/scheduler/store"
	dto "github.com/prometheus/client_model/go"
)

func TestBackoffFullJitter(t *testing.T) {
	r := jobspec.Retry{InitialBackoffMs: 100, MaxBackoffMs: 1000}
	for _, c := range []struct {
		attempt int
		u       float64
		want    time.Duration
	}{
		{1, 0.999, 99900 * time.Microsecond}, // ceiling 100ms
		{2, 0.5, 100 * time.Millisecond},     // ceiling 200ms
		{4, 1, 800 * time.Millisecond},
		{5, 1, time.Second}, // capped at maxBackoff
		{60, 0.25, 250 * time.Millisecond},
		{3, 0, 0},
	} {
		if got := Backoff(r, c.attempt, c.u); got != c.want {
			t.Errorf("Backoff(attempt %d, u %v) = %v, want %v", c.attempt, c.u, got, c.want)
		}
	}
}

// claimRecorder is a worker Store that records claim calls and answers
// with leases of the priorities queued in it.
type claimRecorder struct {
	ready []string // priorities, in claim order
	calls []string
}

func (c *claimRecorder) Claim(_ context.Context, _ string, n int, _ time.Duration, maxRank int) ([]store.Lease, error) {
	c.calls = append(c.calls, fmt.Sprintf("n=%d rank<=%d", n, maxRank))
	var out []store.Lease
	rest := c.ready[:0:0]
	for _, p := range c.ready {
		if len(out) < n && jobspec.PriorityRank(p) <= maxRank {
			out = append(out, store.Lease{Spec: &jobspec.Spec{Execution: jobspec.Execution{Priority: p}}})
			continue
		}
		rest = append(rest, p)
	}
	c.ready = rest
	return out, nil
}
func (c *claimRecorder) Heartbeat(context.Context, int64, int64, time.Duration) error { return nil }
func (c *claimRecorder) Succeed(context.Context, int64, int64) error                  { return nil }
func (c *claimRecorder) RetryLater(context.Context, int64, int64, time.Duration, string) error {
	return nil
}
func (c *claimRecorder) Dead(context.Context, int64, int64, string) error { return nil }
func (c *claimRecorder) Defer(context.Context, int64, int64, time.Duration, time.Duration, string) (bool, error) {
	return false, nil
}

// TestReservedHighCapacity: with 4 slots and 1 reserved, NORMAL runs may
// take 3; once they do, the last slot is offered to HIGH runs only.
func TestReservedHighCapacity(t *testing.T) {
	rec := &claimRecorder{ready: []string{"NORMAL", "NORMAL", "NORMAL", "NORMAL", "NORMAL", "HIGH"}}
	w, err := New(Config{Store: rec, Client: http.DefaultClient, Concurrency: 4, ReservedHigh: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := w.claim(context.Background(), 4, 3) // idle: 4 free, NORMAL allowance 3
	if len(got) != 4 || fmt.Sprint(rec.calls) != "[n=4 rank<=0 n=3 rank<=2]" {
		t.Fatalf("idle claim: %d leases, calls %v", len(got), rec.calls)
	}
	if p := got[0].Spec.Execution.Priority; p != "HIGH" {
		t.Fatalf("first lease %s, want HIGH", p)
	}
	rec.calls, rec.ready = nil, []string{"NORMAL", "NORMAL"}
	if got := w.claim(context.Background(), 1, 0); len(got) != 0 || fmt.Sprint(rec.calls) != "[n=1 rank<=0]" {
		t.Fatalf("reserved slot went to %v (calls %v)", got, rec.calls)
	}
	rec.calls = nil
	if got := w.claim(context.Background(), 2, 5); len(got) != 2 || fmt.Sprint(rec.calls) != "[n=2 rank<=2]" {
		t.Fatalf("unreserved claim: %v (calls %v)", got, rec.calls)
	}
	if _, err := New(Config{Store: rec, Client: http.DefaultClient, Concurrency: 2, ReservedHigh: 2}); err == nil {
		t.Fatal("ReservedHigh >= Concurrency accepted")
	}
}

// yieldStore records when the worker first claims; it has nothing to lease.
type yieldStore struct {
	claimRecorder
	first atomic.Int64 // unix nanos of the first claim
}

func (y *yieldStore) Claim(context.Context, string, int, time.Duration, int) ([]store.Lease, error) {
	y.first.CompareAndSwap(0, time.Now().UnixNano())
	return nil, nil
}

// TestYieldHoldsClaimsBriefly: while Yield reports a firing burst the
// worker does not claim — for at most MaxYield — and claims as soon as
// the burst is over.
func TestYieldHoldsClaimsBriefly(t *testing.T) {
	m := metrics.New(nil)
	run := func(maxYield time.Duration, yield func() bool) time.Duration {
		st := &yieldStore{}
		w, err := New(Config{Store: st, Client: http.DefaultClient, Poll: 10 * time.Millisecond, Yield: yield,
			MaxYield: maxYield, Metrics: m})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		done := make(chan struct{})
		go func() { _ = w.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		eventually.True(t, 20*time.Second, "the worker's first claim", func() bool { return st.first.Load() != 0 })
		return time.Unix(0, st.first.Load()).Sub(start)
	}
	if d := run(500*time.Millisecond, func() bool { return true }); d < 500*time.Millisecond {
		t.Fatalf("claimed %v into an endless burst, want held for MaxYield (500ms)", d)
	}
	counter := func() float64 {
		var v dto.Metric
		if err := m.WorkerYield.Write(&v); err != nil {
			t.Fatal(err)
		}
		return v.GetCounter().GetValue()
	}
	before := counter()
	var over atomic.Bool
	time.AfterFunc(200*time.Millisecond, func() { over.Store(true) })
	if d := run(10*time.Second, func() bool { return !over.Load() }); d < 200*time.Millisecond || d >= 10*time.Second {
		t.Fatalf("claimed %v into a 200 ms burst with MaxYield 10s, want just after the burst", d)
	}
	if held := counter() - before; held < 0.15 || held > 10 {
		t.Fatalf("portico_scheduler_worker_yield_seconds_total grew by %.3f s for a 200 ms hold", held)
	}
}
