package service_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/ratelimitsvc/bucket"
	"github.com/portico-io/portico/ratelimitsvc/rules"
	"github.com/portico-io/portico/ratelimitsvc/service"
)

// cable is a TCP forwarder to Redis that the test can cut and restore, to
// stop "Redis" mid-test without touching the shared server.
type cable struct {
	t      *testing.T
	addr   string
	target string
	mu     sync.Mutex
	lis    net.Listener
	conns  []net.Conn
	hung   bool // accept and hold connections without forwarding
}

func newCable(t *testing.T, target string) *cable {
	c := &cable{t: t, target: target}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.addr = lis.Addr().String()
	c.serve(lis)
	t.Cleanup(c.cut)
	return c
}

func (c *cable) serve(lis net.Listener) {
	c.mu.Lock()
	c.lis = lis
	c.mu.Unlock()
	go func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			c.mu.Lock()
			if c.hung && c.lis == lis {
				c.conns = append(c.conns, in)
				c.mu.Unlock()
				continue
			}
			c.mu.Unlock()
			out, err := net.Dial("tcp", c.target)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			if c.lis != lis { // cut while this one was being accepted
				c.mu.Unlock()
				in.Close()
				out.Close()
				continue
			}
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
}

// cut closes the listener and every connection.
func (c *cable) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lis != nil {
		c.lis.Close()
		c.lis = nil
	}
	for _, x := range c.conns {
		x.Close()
	}
	c.conns = nil
}

// hang makes Redis unresponsive: open connections are dropped and new ones
// are accepted but never answered, so calls run into the timeout.
func (c *cable) hang() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hung = true
	for _, x := range c.conns {
		x.Close()
	}
	c.conns = nil
}

// unhang forwards new connections again.
func (c *cable) unhang() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hung = false
	for _, x := range c.conns {
		x.Close()
	}
	c.conns = nil
}

// restore listens again on the same address.
func (c *cable) restore() {
	lis, err := net.Listen("tcp", c.addr)
	if err != nil {
		c.t.Fatal(err)
	}
	c.serve(lis)
}

// Redis stops mid-test (refused, then hung): OPEN rules fall back to a
// local bucket at limit/replicas, CLOSED rules deny, the breaker keeps the
// outage from costing a timeout per request; Redis back: the breaker's probe
// closes it and enforcement resumes without a restart, with the buckets
// Redis kept.
func TestRedisOutageAndRecovery(t *testing.T) {
	// Generous: the healthy phases must not time out on a loaded machine
	// (that would fail open and look like a wrong decision). The tight
	// bound is TestRedisUnreachableFailModes' job.
	const timeout = 200 * time.Millisecond
	const replicas, failures, delay = 4, 3, 300 * time.Millisecond
	cab := newCable(t, testdeps.Redis(t))
	c := bucket.NewRedisClient(cab.addr)
	defer c.Close()
	rd, err := bucket.NewRedis(bucket.RedisConfig{Client: c, Timeout: timeout, BreakerFailures: failures, BreakerDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	// 40/h + 20 burst globally: 10/h + 5 burst locally, on a frozen clock.
	open := rule("open", 40, 20, time.Hour, "consumer", "")
	closed := rule("closed", 5, 0, time.Hour, "login", "")
	closed.FailMode = rules.FailClosed
	live := rules.NewLive()
	if err := live.Update(rules.SourceXDS, "1", []*rules.Rule{open, closed}); err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	local := bucket.NewMemory()
	local.Now = clk.Now
	reg := prometheus.NewRegistry()
	s, err := service.New(service.Config{Rules: live, Backend: rd, KeyPrefix: prefix(t), Replicas: replicas, Local: local, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	consumer, login := req("portico", desc("consumer", "acme")), req("portico", desc("login", "bob"))

	var slow int // calls that took more than half the timeout
	timed := func(r *rlsv3.RateLimitRequest) rlsv3.RateLimitResponse_Code {
		start := time.Now()
		resp := call(t, s, r)
		el := time.Since(start)
		if el > 10*timeout {
			t.Fatalf("call took %v with a %v timeout", el, timeout)
		}
		if el > timeout/2 {
			slow++
		}
		return resp.GetOverallCode()
	}
	degraded := func() float64 {
		return gauge(t, reg, "portico_ratelimitsvc_degraded")
	}
	for range 60 { // exhaust the shared bucket
		timed(consumer)
	}
	if timed(consumer) != OVER || timed(login) != OK || degraded() != 0 {
		t.Fatal("healthy Redis: wrong decisions")
	}

	const localCap, localLimit = (40 + 20) / replicas, 40 / replicas
	for name, stop := range map[string]func(){"refused": cab.cut, "hung": cab.hang} {
		clk.Advance(2 * time.Hour) // a full local bucket, whatever came before
		stop()
		slow = 0
		began := time.Now()
		admitted := 0
		for range 3 * localCap {
			if timed(consumer) == OK {
				admitted++
			}
			if got := timed(login); got != OVER {
				t.Fatalf("%s: CLOSED rule during outage: %v", name, got)
			}
		}
		// The local clock is frozen: the full local bucket admits its
		// capacity (limit + burst, divided by replicas) and no more …
		if admitted != localCap {
			t.Fatalf("%s: OPEN rule admitted %d during the outage, want the local capacity %d", name, admitted, localCap)
		}
		// … and one window later, the local limit.
		clk.Advance(time.Hour)
		admitted = 0
		for range 3 * localCap {
			if timed(consumer) == OK {
				admitted++
			}
		}
		if admitted != localLimit {
			t.Fatalf("%s: OPEN rule admitted %d in the next local window, want the local limit %d", name, admitted, localLimit)
		}
		// Without a breaker all 6×localCap+... calls would be slow; with it,
		// only the failures that open it and one probe per delay.
		if most := failures + 1 + int(time.Since(began)/delay); slow > most {
			t.Fatalf("%s: %d slow calls in %v, want at most %d (breaker)", name, slow, time.Since(began), most)
		}
		if degraded() != 1 {
			t.Fatalf("%s: degraded gauge %v, want 1", name, degraded())
		}
		t.Logf("%s: %d slow calls in %v", name, slow, time.Since(began))
		if name == "refused" {
			cab.restore()
		} else {
			cab.unhang()
		}
		deadline := time.Now().Add(10 * time.Second)
		for timed(login) != OK {
			if time.Now().After(deadline) {
				t.Fatalf("%s: CLOSED rule still denying 10s after Redis came back", name)
			}
		}
		if degraded() != 0 {
			t.Fatalf("%s: degraded gauge %v after recovery", name, degraded())
		}
		// The OPEN rule's bucket survived in Redis: still exhausted.
		if got := timed(consumer); got != OVER {
			t.Fatalf("%s: OPEN rule after recovery: %v, want OVER_LIMIT from the kept bucket", name, got)
		}
	}
}

func gauge(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
