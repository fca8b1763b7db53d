package httptarget

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"

	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/target"
)

func delivery(t *testing.T, url string) target.Delivery {
	t.Helper()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &jobspec.Spec{Tenant: "t", Schedule: jobspec.Schedule{Type: jobspec.TypeOneOff, At: &at},
		Target: jobspec.Target{Type: jobspec.TargetHTTP, HTTP: &jobspec.HTTPTarget{URL: url}, Payload: []byte(`{"at":"{{scheduledAt}}"}`)}}
	if err := s.Normalize(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	return target.Delivery{RunID: 1, JobID: 7, ScheduledAt: at, Attempt: 1, Spec: s}
}

type server struct {
	calls  atomic.Int32
	status atomic.Int32
	srv    *httptest.Server
}

func newServer(t *testing.T, status int) *server {
	s := &server{}
	s.status.Store(int32(status))
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		if r.Header.Get("Idempotency-Key") != "7:2026-01-01T00:00:00Z" {
			w.WriteHeader(400)
			return
		}
		w.WriteHeader(int(s.status.Load()))
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// TestBreakerPerHost: three 503s open the host's circuit; further attempts
// are Deferred without a call while another host is unaffected; after the
// delay trial calls succeed and close it.
func TestBreakerPerHost(t *testing.T) {
	bad, good := newServer(t, 503), newServer(t, 200)
	states := make(chan circuitbreaker.State, 16)
	tg, err := New(Config{Client: http.DefaultClient, BreakerFailures: 3, BreakerDelay: 200 * time.Millisecond, BreakerSuccesses: 2,
		OnBreakerState: func(_ string, s circuitbreaker.State) { states <- s }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 3 {
		if r := tg.Deliver(ctx, delivery(t, bad.srv.URL)); r.Outcome != target.Retryable {
			t.Fatalf("call %d: %+v", i, r)
		}
	}
	if s := <-states; s != circuitbreaker.OpenState {
		t.Fatalf("state after 3 failures: %v", s)
	}
	r := tg.Deliver(ctx, delivery(t, bad.srv.URL))
	if r.Outcome != target.Deferred || r.RetryAfter <= 0 || r.RetryAfter > 300*time.Millisecond || bad.calls.Load() != 3 {
		t.Fatalf("open circuit: %+v after %d calls", r, bad.calls.Load())
	}
	if r := tg.Deliver(ctx, delivery(t, good.srv.URL)); r.Outcome != target.Succeeded {
		t.Fatalf("other host: %+v", r)
	}
	bad.status.Store(200)
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for tg.Deliver(ctx, delivery(t, bad.srv.URL)).Outcome == target.Deferred {
		select {
		case <-deadline:
			t.Fatal("circuit never half-opened")
		case <-tick.C:
		}
	}
	if s := <-states; s != circuitbreaker.HalfOpenState {
		t.Fatalf("want half-open, got %v", s)
	}
	if r := tg.Deliver(ctx, delivery(t, bad.srv.URL)); r.Outcome != target.Succeeded {
		t.Fatalf("second trial: %+v", r)
	}
	if s := <-states; s != circuitbreaker.ClosedState || tg.State(bad.srv.URL) != circuitbreaker.ClosedState {
		t.Fatalf("want closed after 2 successes, got %v", s)
	}
}

// TestBreakerIgnoresClientErrorsAndOwnCancellation: 4xx answers and our
// own cancellations never open the circuit; timeouts do.
func TestBreakerIgnoresClientErrorsAndOwnCancellation(t *testing.T) {
	notFound := newServer(t, 404)
	tg, _ := New(Config{Client: http.DefaultClient, BreakerFailures: 2, BreakerDelay: time.Hour})
	ctx := context.Background()
	for range 5 {
		if r := tg.Deliver(ctx, delivery(t, notFound.srv.URL)); r.Outcome != target.Fatal {
			t.Fatalf("404: %+v", r)
		}
	}
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // lets the server notice the client hanging up
		<-r.Context().Done()
	}))
	t.Cleanup(hang.Close)
	for range 3 {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if r := tg.Deliver(cctx, delivery(t, hang.URL)); r.Outcome != target.Retryable {
			t.Fatalf("cancelled call: %+v", r)
		}
	}
	if s := tg.State(notFound.srv.URL); s != circuitbreaker.ClosedState {
		t.Fatalf("4xx host circuit %v", s)
	}
	if s := tg.State(hang.URL); s != circuitbreaker.ClosedState {
		t.Fatalf("circuit %v after our own cancellations", s)
	}
	for range 2 {
		tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		tg.Deliver(tctx, delivery(t, hang.URL))
		cancel()
	}
	if s := tg.State(hang.URL); s != circuitbreaker.OpenState {
		t.Fatalf("circuit %v after two timeouts, want open", s)
	}
}

// TestBreakersAreBounded: jobs may name any number of hosts, but at most
// MaxBreakers breakers are kept; the least recently used closed one goes
// first, and an open circuit survives the churn.
func TestBreakersAreBounded(t *testing.T) {
	bad := newServer(t, 503)
	tg, err := New(Config{Client: http.DefaultClient, BreakerFailures: 1, BreakerDelay: time.Hour, MaxBreakers: 3})
	if err != nil {
		t.Fatal(err)
	}
	if res := tg.Deliver(context.Background(), delivery(t, bad.srv.URL)); res.Outcome != target.Retryable {
		t.Fatalf("503: %+v", res)
	}
	if tg.State(bad.srv.URL) != circuitbreaker.OpenState {
		t.Fatalf("breaker after one failure: %s", tg.State(bad.srv.URL))
	}
	for i := range 8 {
		good := newServer(t, 200)
		if res := tg.Deliver(context.Background(), delivery(t, good.srv.URL)); res.Outcome != target.Succeeded {
			t.Fatalf("host %d: %+v", i, res)
		}
		if n := tg.Breakers(); n > 3 {
			t.Fatalf("after %d hosts: %d breakers, want at most 3", i+2, n)
		}
	}
	if tg.State(bad.srv.URL) != circuitbreaker.OpenState {
		t.Fatal("the open circuit was evicted before closed ones")
	}
	if res := tg.Deliver(context.Background(), delivery(t, bad.srv.URL)); res.Outcome != target.Deferred {
		t.Fatalf("open host after churn: %+v, want Deferred", res)
	}
}

// TestOutcomeByStatus: a 2xx answer succeeds with no message; 429, 408 and
// 5xx are retryable and 4xx fatal, with the status and the start of the
// body as the message; the body is read to the end either way, so the
// connection is reused.
func TestOutcomeByStatus(t *testing.T) {
	var status atomic.Int32
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(int(status.Load()))
		_, _ = io.WriteString(w, "  busy, come back later  ")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	tg, err := New(Config{Client: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		status int
		want   target.Outcome
		msg    string
	}{
		{204, target.Succeeded, ""},
		{200, target.Succeeded, ""},
		{503, target.Retryable, "HTTP 503: busy, come back later"},
		{429, target.Retryable, "HTTP 429: busy, come back later"},
		{404, target.Fatal, "HTTP 404: busy, come back later"},
	} {
		status.Store(int32(tc.status))
		if r := tg.Deliver(context.Background(), delivery(t, srv.URL)); r.Outcome != tc.want || r.Message != tc.msg {
			t.Errorf("HTTP %d: %+v, want outcome %v and message %q", tc.status, r, tc.want, tc.msg)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 5 calls, want 1 reused", n)
	}
}
