package e2e_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/ratelimitsvc"
)

// TestRateLimitFailModeWhenServiceDown: a route whose rate limits reach a
// failMode CLOSED rule is refused by the gateway when ratelimitsvc is down
// or does not answer in time, while a route with only OPEN rules goes on
// unchecked. ratelimitsvc applies fail modes itself when its Redis is
// down; when ratelimitsvc is the one missing, only the gateway's filter
// configuration decides, and that is what the control plane compiles.
//
// The gateway's decisions come from the route configuration and listener
// the control plane serves over ADS (gatewayView): which ratelimit filter
// (stage) reads each route's descriptors, its timeout, failure_mode_deny
// and status_on_error. The calls are made for real: to ratelimitsvc while
// it runs, then to its address once it has stopped (connection refused),
// then to a socket on that address that accepts and never answers (a hung
// service: the filter's timeout expires).
func TestRateLimitFailModeWhenServiceDown(t *testing.T) {
	dbURL := testdeps.Postgres(t)
	cp := startControlPlane(t, dbURL, controlplane.Config{})
	const node = "e2e-ratelimit-failmode"
	rlAddr, stopRL := startRateLimitStoppable(t, cp.XDS, node)
	gwCP := startControlPlane(t, dbURL, controlplane.Config{Compile: compile.Options{RateLimitAddress: rlAddr}})
	api := newAdminAPI(t, cp.Admin)

	api.create("clusters", map[string]any{"name": "echo", "endpoints": []any{map[string]any{"address": "127.0.0.1", "port": 18900}}}, nil)
	routeKey := func(name string) []any {
		return []any{map[string]any{"key": "route", "value": name}}
	}
	api.create("routes", map[string]any{"name": "login", "match": map[string]any{"path": "/login"}, "cluster": "echo",
		"auth": map[string]any{"mode": "none"}, "retries": map[string]any{"disabled": true},
		"rateLimits": []any{map[string]any{"descriptors": append(routeKey("login"), map[string]any{"key": "remote_address", "remoteAddress": true})}}}, nil)
	api.create("routes", map[string]any{"name": "echo", "match": map[string]any{"pathPrefix": "/echo"}, "cluster": "echo",
		"auth": map[string]any{"mode": "none"}, "retries": map[string]any{"disabled": true},
		"rateLimits": []any{map[string]any{"descriptors": routeKey("echo")}}}, nil)
	api.create("ratelimit-rules", map[string]any{"name": "login-per-ip", "domain": "portico", "failMode": "CLOSED",
		"descriptors": []any{map[string]any{"key": "route", "value": "login"}, map[string]any{"key": "remote_address"}}, "limit": 2, "window": "1h"}, nil)
	v := api.create("ratelimit-rules", map[string]any{"name": "echo", "domain": "portico", "failMode": "OPEN",
		"descriptors": routeKey("echo"), "limit": 1000, "window": "1h"}, nil)
	api.waitAcked(node, "portico-ratelimit", v, ratelimitTypes...)
	gw := fetchGatewayView(t, gwCP.XDS, "e2e-gateway-failmode", v)
	if gw.ratelimitAddr != rlAddr {
		t.Fatalf("gateway's ratelimit cluster at %s, want %s", gw.ratelimitAddr, rlAddr)
	}

	login := func() *httpRequest { return newRequest("POST", "http://api.e2e.test/login") }
	echo := func() *httpRequest { return newRequest("GET", "http://api.e2e.test/echo/x") }
	decide := func(rls rlsv3.RateLimitServiceClient, r *httpRequest, within time.Duration) rateLimitOutcome {
		t.Helper()
		gw.enter(t, r)
		rt := gw.route(t, r)
		if rt == nil {
			t.Fatalf("%s: no route", r.headers[":path"])
		}
		return gw.limit(t, rls, rt, r, within)
	}

	// Which filter reads which route.
	lf, ef := gw.rateLimitFilterOf(t, gw.route(t, login())), gw.rateLimitFilterOf(t, gw.route(t, echo()))
	if lf.name != compile.FilterRateLimitFailClosed || !lf.failureModeDeny || lf.statusOnError != http.StatusServiceUnavailable {
		t.Fatalf("login is read by %+v; want the fail-closed filter answering 503", lf)
	}
	if ef.name != compile.FilterRateLimit || ef.failureModeDeny {
		t.Fatalf("echo is read by %+v; want the fail-open filter", ef)
	}

	// ratelimitsvc up: both stages get real answers (2 logins per hour).
	// Not timed: a loaded test machine is no measure of the filters'
	// timeouts, and a call cut short could still have taken a token.
	up := rlsv3.NewRateLimitServiceClient(dialGRPC(t, gw.ratelimitAddr))
	for i, want := range []int{0, 0, http.StatusTooManyRequests} {
		if o := decide(up, login(), convergeTimeout); o.err != nil || o.status != want {
			t.Fatalf("login %d with ratelimitsvc up: %d (%v, %v), want %d", i+1, o.status, o.resp.GetOverallCode(), o.err, want)
		}
	}
	if o := decide(up, echo(), convergeTimeout); o.err != nil || o.status != 0 || o.resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("echo with ratelimitsvc up: %d %v %v", o.status, o.resp.GetOverallCode(), o.err)
	}

	// ratelimitsvc stopped: nothing listens at its address.
	stopRL()
	down := rlsv3.NewRateLimitServiceClient(dialGRPC(t, gw.ratelimitAddr))
	checkOutage := func(what string, rls rlsv3.RateLimitServiceClient) {
		t.Helper()
		for range 3 {
			if o := decide(rls, login(), 0); o.err == nil || o.status != http.StatusServiceUnavailable {
				t.Fatalf("login, ratelimitsvc %s: status %d (err %v); want 503", what, o.status, o.err)
			}
			if o := decide(rls, echo(), 0); o.err == nil || o.status != 0 {
				t.Fatalf("echo, ratelimitsvc %s: status %d (err %v); want it let through", what, o.status, o.err)
			}
		}
	}
	checkOutage("unreachable", down)

	// A service that takes connections and never answers: late is the same
	// as missing, after each filter's own timeout.
	blackHole(t, gw.ratelimitAddr)
	start := time.Now()
	checkOutage("hung", rlsv3.NewRateLimitServiceClient(dialGRPC(t, gw.ratelimitAddr)))
	if d := time.Since(start); d < 3*(lf.timeout+ef.timeout) {
		t.Fatalf("6 calls to a hung service took %v: faster than the filters' timeouts", d)
	}

	// In front of all this, the default pre-auth limit (a local one: it
	// does not depend on ratelimitsvc).
	if gw.preAuth == nil || gw.preAuth.requestsPerSecond != compile.DefaultPreAuthRequestsPerSecond || gw.preAuth.burst != compile.DefaultPreAuthRequestsPerSecond {
		t.Fatalf("ingress_http pre-auth limit %+v, want the default", gw.preAuth)
	}
}

// startRateLimitStoppable is startRateLimit with a stop function: after
// stop returns, nothing listens at the returned gRPC address.
func startRateLimitStoppable(t *testing.T, xdsAddr, nodeID string) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan ratelimitsvc.Addrs, 1)
	done := make(chan error, 1)
	cfg := ratelimitsvc.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", XDSAddr: xdsAddr, NodeID: nodeID, StateDir: t.TempDir(),
		RedisAddr: testdeps.Redis(t), RedisTimeout: 5 * time.Second, Logger: testLogger(), InsecurePlaintext: true,
		KeyPrefix: fmt.Sprintf("portico:e2e:%s:%d:", t.Name(), time.Now().UnixNano()), Ready: ready}
	go func() { done <- ratelimitsvc.Run(ctx, cfg) }()
	var addrs ratelimitsvc.Addrs
	select {
	case addrs = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("ratelimitsvc exited before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("ratelimitsvc not ready after 30s")
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ratelimitsvc: %v", err)
		}
	}
	t.Cleanup(stop)
	return addrs.GRPC, stop
}

// blackHole listens at addr (free again: its server stopped), accepts
// connections and never writes to them.
func blackHole(t *testing.T, addr string) {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		_ = lis.Close()
		<-accepted
		for _, c := range conns {
			_ = c.Close()
		}
	})
}
