package service_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portico-io/portico/ratelimitsvc/bucket"
	"github.com/portico-io/portico/ratelimitsvc/rules"
	"github.com/portico-io/portico/ratelimitsvc/service"
)

// counting counts the calls that reach the store.
type counting struct {
	service.Backend
	calls atomic.Int64
}

func (c *counting) Check(ctx context.Context, items []bucket.Item) (bucket.Decision, error) {
	c.calls.Add(1)
	return c.Backend.Check(ctx, items)
}

// 50 goroutines on 4 instances hammer one highVolume key: the instances
// spend leased batches locally, so the store sees a fraction of the
// requests; admitted stays within limit + burst ± replicas × batch; and
// once the bucket is empty the pre-filter denies without store calls.
func TestLeasingHammerFourInstances(t *testing.T) {
	const limit, burst, replicas = 1000, 100, 4
	const batch = limit / 100
	// One token per 86.4s: nothing refills while the test runs.
	hot := rule("hot", limit, burst, 24*time.Hour, "consumer", "")
	hot.HighVolume = true
	live := rules.NewLive()
	if err := live.Update(rules.SourceXDS, "1", []*rules.Rule{hot}); err != nil {
		t.Fatal(err)
	}
	pfx := prefix(t)
	var stores []*counting
	var svcs []*service.Service
	for range replicas {
		st := &counting{Backend: redisBackend(t, nil, 2*time.Second)}
		s, err := service.New(service.Config{Rules: live, Backend: st, KeyPrefix: pfx})
		if err != nil {
			t.Fatal(err)
		}
		stores, svcs = append(stores, st), append(svcs, s)
	}
	calls := func() (n int64) {
		for _, st := range stores {
			n += st.calls.Load()
		}
		return n
	}
	r := req("portico", desc("consumer", "acme"))
	const goroutines, each = 50, 40
	var admitted, failed atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			s := svcs[g%replicas]
			for range each {
				resp, err := s.ShouldRateLimit(context.Background(), r)
				switch {
				case err != nil:
					failed.Add(1)
				case resp.GetOverallCode() == OK:
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		t.Fatalf("%d calls failed", f)
	}
	a, n := admitted.Load(), calls()
	t.Logf("admitted %d of %d with %d store calls (batch %d)", a, goroutines*each, n, batch)
	// Leased tokens are consumed in the store first, so the fleet admits at
	// most limit + burst; the asserted bound is the issue's, which also
	// covers a lease outliving its window. Unspent leases explain a shortfall.
	if hi, lo := int64(limit+burst+replicas*batch), int64(limit+burst-replicas*batch); a > hi || a < lo {
		t.Fatalf("admitted %d, want within [%d, %d]", a, lo, hi)
	}
	if n > goroutines*each/4 {
		t.Fatalf("%d store calls for %d requests: leases not used", n, goroutines*each)
	}
	// The bucket is empty and every instance has been told so (or still
	// holds a lease to spend first): more requests stay off the store.
	for _, s := range svcs {
		for range batch + 1 {
			call(t, s, r)
		}
	}
	before := calls()
	for _, s := range svcs {
		for range 100 {
			if call(t, s, r).GetOverallCode() != OVER {
				t.Fatal("admitted after the bucket and the leases ran dry")
			}
		}
	}
	if after := calls(); after != before {
		t.Fatalf("pre-filter: %d store calls for 400 requests on an empty bucket", after-before)
	}
}

// hung is a store that never answers: each Check records its context's
// deadline and returns when the context ends (or after 2×timeout when the
// caller set no deadline, which the test reports as a failure).
type hung struct {
	timeout   time.Duration
	entered   chan struct{}
	mu        sync.Mutex
	deadlines []time.Time // zero = the call had no deadline
}

func (h *hung) Timeout() time.Duration { return h.timeout }

func (h *hung) Check(ctx context.Context, _ []bucket.Item) (bucket.Decision, error) {
	dl, _ := ctx.Deadline()
	h.mu.Lock()
	h.deadlines = append(h.deadlines, dl)
	first := len(h.deadlines) == 1
	h.mu.Unlock()
	if first {
		close(h.entered)
	}
	select {
	case <-ctx.Done():
	case <-time.After(2 * h.timeout):
	}
	return bucket.Decision{}, bucket.ErrBackend
}

// A request that waits for another's lease refill and then calls the store
// itself spends one store timeout in all, not one per step: its store call
// carries the deadline set when the request arrived.
func TestLeasedRequestSpendsOneTimeout(t *testing.T) {
	hot := rule("hot", 1000, 0, time.Hour, "consumer", "")
	hot.HighVolume = true
	st := &hung{timeout: 300 * time.Millisecond, entered: make(chan struct{})}
	s := newService(t, st, hot)
	r := req("portico", desc("consumer", "acme"))
	first := make(chan struct{})
	go func() {
		defer close(first)
		_, _ = s.ShouldRateLimit(context.Background(), r)
	}()
	<-st.entered // the first request's refill is in flight
	start := time.Now()
	resp, err := s.ShouldRateLimit(context.Background(), r)
	if err != nil || resp.GetOverallCode() != OK { // fails open to the local bucket
		t.Fatalf("second request: %v %v", resp, err)
	}
	<-first
	st.mu.Lock()
	defer st.mu.Unlock()
	// Either the budget ran out during the wait (one store call: the
	// refill), or the request called the store with what was left of it.
	switch n := len(st.deadlines); {
	case n == 1:
		return
	case n > 2:
		t.Fatalf("%d store calls, want at most 2", n)
	}
	// The budget starts inside ShouldRateLimit, a little after start; a
	// fresh timeout per step would put the deadline near start + 2×timeout.
	if dl, by := st.deadlines[1], start.Add(st.timeout*3/2); dl.IsZero() || dl.After(by) {
		t.Fatalf("the waiting request's store call has deadline %v, want by %v (one timeout after it arrived)", dl, by)
	}
}
