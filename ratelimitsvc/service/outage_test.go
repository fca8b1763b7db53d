package service_test

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/ratelimitsvc/bucket"
	"github.com/portico-io/portico/ratelimitsvc/rules"
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

// restore listens again on the same address.
func (c *cable) restore() {
	lis, err := net.Listen("tcp", c.addr)
	if err != nil {
		c.t.Fatal(err)
	}
	c.serve(lis)
}

// Redis stops mid-test: OPEN rules allow, CLOSED rules deny, every call
// stays bounded by the timeout; Redis back: enforcement resumes without a
// restart, with the buckets Redis kept.
func TestRedisOutageAndRecovery(t *testing.T) {
	// Generous: the healthy phases must not time out on a loaded machine
	// (that would fail open and look like a wrong decision). The tight
	// bound is TestRedisUnreachableFailModes' job.
	const timeout = 200 * time.Millisecond
	cab := newCable(t, testdeps.Redis(t))
	c := bucket.NewRedisClient(cab.addr)
	defer c.Close()
	rd, err := bucket.NewRedis(bucket.RedisConfig{Client: c, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	open := rule("open", 2, 0, time.Hour, "consumer", "")
	closed := rule("closed", 5, 0, time.Hour, "login", "")
	closed.FailMode = rules.FailClosed
	s := newService(t, rd, open, closed)
	consumer, login := req("portico", desc("consumer", "acme")), req("portico", desc("login", "bob"))

	timed := func(r *rlsv3.RateLimitRequest) rlsv3.RateLimitResponse_Code {
		start := time.Now()
		resp := call(t, s, r)
		if el := time.Since(start); el > 10*timeout {
			t.Fatalf("call took %v with a %v timeout", el, timeout)
		}
		return resp.GetOverallCode()
	}
	if timed(consumer) != OK || timed(consumer) != OK || timed(consumer) != OVER || timed(login) != OK {
		t.Fatal("healthy Redis: wrong decisions")
	}
	cab.cut()
	for range 10 {
		if got := timed(consumer); got != OK {
			t.Fatalf("OPEN rule during outage: %v", got)
		}
		if got := timed(login); got != OVER {
			t.Fatalf("CLOSED rule during outage: %v", got)
		}
	}
	cab.restore()
	deadline := time.Now().Add(10 * time.Second)
	for timed(login) != OK {
		if time.Now().After(deadline) {
			t.Fatal("CLOSED rule still denying 10s after Redis came back")
		}
	}
	// The OPEN rule's bucket survived in Redis: still exhausted.
	if got := timed(consumer); got != OVER {
		t.Fatalf("OPEN rule after recovery: %v, want OVER_LIMIT from the kept bucket", got)
	}
}
