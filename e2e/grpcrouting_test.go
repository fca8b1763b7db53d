package e2e_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/xdstest"
)

// backend is a gRPC TestService answering with its id, or failing every
// call while fail is set; calls counts what reached it.
type backend struct {
	testgrpc.UnimplementedTestServiceServer
	id    string
	port  int
	fail  atomic.Bool
	calls atomic.Int64
}

func (b *backend) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	b.calls.Add(1)
	if b.fail.Load() {
		return nil, status.Errorf(codes.Unavailable, "backend %s is failing", b.id)
	}
	return &testgrpc.SimpleResponse{ServerId: b.id}, nil
}

func startBackend(t *testing.T, id string) *backend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{id: id, port: lis.Addr().(*net.TCPAddr).Port}
	s := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, b)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return b
}

func endpoint(b *backend) map[string]any {
	return map[string]any{"address": "127.0.0.1", "port": b.port}
}

// firstRPC waits until the channel, resolving through xDS, completes an
// RPC: a new client's LDS, RDS, CDS and EDS round trips and its first
// connection can take more than one RPC deadline on a loaded machine.
func firstRPC(t *testing.T, c testgrpc.TestServiceClient) {
	t.Helper()
	xdstest.Eventually(t, convergeTimeout, "a first RPC through xDS", func() bool {
		return !strings.HasPrefix(xdstest.Reached(c), "error")
	})
}

// rpcWorkers is how many RPCs are in flight at once when sampling: enough
// to keep a loaded machine busy, few enough to be gentle on it.
const rpcWorkers = 8

// spread makes n RPCs on c and counts them by the id of the backend that
// answered; failed RPCs count under "error".
func spread(t *testing.T, c testgrpc.TestServiceClient, n int) map[string]int {
	t.Helper()
	var mu sync.Mutex
	counts := map[string]int{}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range rpcWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
				cancel()
				id := resp.GetServerId()
				if err != nil {
					id = "error"
				}
				mu.Lock()
				counts[id]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return counts
}

// assertShare fails unless id's share of the n RPCs in counts is within
// five standard deviations of the binomial expectation p·n (a false alarm
// about once in 3.5 million runs).
func assertShare(t *testing.T, what string, counts map[string]int, n int, id string, p float64) {
	t.Helper()
	if counts["error"] > 0 {
		t.Fatalf("%s: %d of %d RPCs failed: %v", what, counts["error"], n, counts)
	}
	want := p * float64(n)
	tol := 5 * math.Sqrt(float64(n)*p*(1-p))
	if got := float64(counts[id]); math.Abs(got-want) > tol {
		t.Fatalf("%s: %s got %v of %d RPCs, want %.0f ± %.0f (%v)", what, id, got, n, want, tol, counts)
	}
	t.Logf("%s: %v (want %s ≈ %.0f ± %.0f)", what, counts, id, want, tol)
}

// TestCanaryWeights: a weighted split made through the admin API is what a
// proxyless gRPC client does, and a change of weights applies on the live
// channel.
func TestCanaryWeights(t *testing.T) {
	cp := startControlPlane(t, testdeps.Postgres(t), controlplane.Config{})
	api := newAdminAPI(t, cp.Admin)
	stable, canary := startBackend(t, "stable"), startBackend(t, "canary")
	api.create("clusters", map[string]any{"name": "stable", "endpoints": []any{endpoint(stable)}}, nil)
	api.create("clusters", map[string]any{"name": "canary", "endpoints": []any{endpoint(canary)}}, nil)
	weights := func(stable, canary int) []any {
		return []any{map[string]any{"cluster": "stable", "weight": stable}, map[string]any{"cluster": "canary", "weight": canary}}
	}
	// gRPC calls are POSTs; retries would only apply with allowNonIdempotent.
	v := api.create("routes", map[string]any{"name": "split", "match": map[string]any{"hosts": []string{"split.e2e.test"}, "pathPrefix": "/"},
		"weightedClusters": weights(80, 20)}, nil)

	const node = "e2e-grpc-canary"
	c := xdstest.Dial(t, cp.XDS, node, "default", "split.e2e.test")
	firstRPC(t, c)
	api.waitAcked(node, "portico-gateway", v, resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType)
	const n = 1000
	assertShare(t, "80/20", spread(t, c, n), n, "canary", 0.2)

	v = api.patch("routes/split", map[string]any{"weightedClusters": weights(30, 70)})
	api.waitAcked(node, "portico-gateway", v, resource.RouteType)
	assertShare(t, "30/70 after the change", spread(t, c, n), n, "canary", 0.7)
}

// TestOutlierEjection: a backend failing every call is ejected from a
// cluster made through the admin API, and its share of the traffic goes to
// the healthy ones.
//
// grpc-go implements only the success-rate and failure-percentage
// detectors (gRFC A50); the admin API's consecutive5xx is Envoy's. The
// compiled OutlierDetection leaves success rate at its defaults, which
// grpc-go enforces: at least 5 hosts with 100 requests each per interval,
// ejecting hosts 1.9 standard deviations below the mean success rate. A 3s
// interval needs about 170 RPCs/s, which a loaded machine under -race
// still makes; ejection then takes at most two intervals.
func TestOutlierEjection(t *testing.T) {
	cp := startControlPlane(t, testdeps.Postgres(t), controlplane.Config{})
	api := newAdminAPI(t, cp.Admin)
	var backends []*backend
	var eps []any
	for i := range 5 {
		b := startBackend(t, fmt.Sprintf("b%d", i))
		backends = append(backends, b)
		eps = append(eps, endpoint(b))
	}
	bad := backends[4]
	bad.fail.Store(true)
	api.create("clusters", map[string]any{"name": "pool", "endpoints": eps,
		"outlierDetection": map[string]any{"consecutive5xx": 5, "interval": "3s", "baseEjectionTime": "60s", "maxEjectionPercent": 50}}, nil)
	v := api.create("routes", map[string]any{"name": "pool", "match": map[string]any{"hosts": []string{"pool.e2e.test"}, "pathPrefix": "/"},
		"cluster": "pool"}, nil)

	const node = "e2e-grpc-outlier"
	c := xdstest.Dial(t, cp.XDS, node, "default", "pool.e2e.test")
	firstRPC(t, c)
	api.waitAcked(node, "portico-gateway", v, resource.ClusterType, resource.EndpointType)

	// Before ejection the failing backend gets its round-robin share.
	start := time.Now()
	first := spread(t, c, 250)
	t.Logf("first batch at %.0f RPCs/s", 250/time.Since(start).Seconds())
	if first["error"] == 0 || bad.calls.Load() == 0 {
		t.Fatalf("the failing backend was never reached: %v", first)
	}
	var last map[string]int
	var batches int
	xdstest.Eventually(t, 40*time.Second, "the failing backend to be ejected", func() bool {
		batches++
		before := bad.calls.Load()
		bs := time.Now()
		last = spread(t, c, 250)
		t.Logf("batch %d: %.0f RPCs/s %v", batches, 250/time.Since(bs).Seconds(), last)
		return last["error"] == 0 && bad.calls.Load() == before
	})
	t.Logf("ejected after %v (%d batches of 250 RPCs): first batch %v, last %v", time.Since(start).Round(time.Millisecond), batches, first, last)
	// Traffic now spreads over the healthy four.
	for _, b := range backends[:4] {
		if last[b.id] == 0 {
			t.Fatalf("healthy backend %s got no traffic after the ejection: %v", b.id, last)
		}
	}
}

// TestFailurePercentageEjection: with failure-percentage detection (part of
// the default outlier detection, here with a short interval), proxyless
// clients eject a failing backend even in a cluster of two, where the
// success-rate detector never runs.
func TestFailurePercentageEjection(t *testing.T) {
	cp := startControlPlane(t, testdeps.Postgres(t), controlplane.Config{})
	api := newAdminAPI(t, cp.Admin)
	good, bad := startBackend(t, "good"), startBackend(t, "bad")
	bad.fail.Store(true)
	api.create("clusters", map[string]any{"name": "pair", "endpoints": []any{endpoint(good), endpoint(bad)},
		"outlierDetection": map[string]any{"interval": "2s", "baseEjectionTime": "60s", "maxEjectionPercent": 50,
			"failurePercentage": map[string]any{"threshold": 50}}}, nil)
	v := api.create("routes", map[string]any{"name": "pair", "match": map[string]any{"hosts": []string{"pair.e2e.test"}, "pathPrefix": "/"},
		"cluster": "pair"}, nil)
	const node = "e2e-grpc-failure-percentage"
	c := xdstest.Dial(t, cp.XDS, node, "default", "pair.e2e.test")
	firstRPC(t, c)
	api.waitAcked(node, "portico-gateway", v, resource.ClusterType, resource.EndpointType)
	if first := spread(t, c, 100); first["error"] == 0 {
		t.Fatalf("the failing backend was never reached: %v", first)
	}
	var last map[string]int
	xdstest.Eventually(t, 30*time.Second, "the failing backend to be ejected", func() bool {
		before := bad.calls.Load()
		last = spread(t, c, 100)
		return last["error"] == 0 && bad.calls.Load() == before
	})
	if last["good"] != 100 {
		t.Fatalf("after the ejection: %v, want every RPC on good", last)
	}
}
