package controlplane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/admin"
	"github.com/portico-io/portico/controlplane/cptest"
	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlstest"
	"github.com/portico-io/portico/internal/xdstest"
)

// BenchmarkPropagationAtScale is BenchmarkPropagation at the size of the
// "config plane at scale" issue: PORTICO_BENCH_ROUTES routes (default
// 10,000) on routes/10 hosts and routes/10 clusters, a quarter with JWT
// auth, a quarter with API-key auth, a fifth rate-limited, loaded with ONE
// POST /admin/v1/config:apply; then PORTICO_BENCH_CLIENTS gateways
// (default 200), each on its own mTLS connection with its own gateway
// certificate, subscribe over ADS as Envoy does (CDS and LDS wildcard, EDS
// and RDS by the names those name) and ACK everything. Then one route at a
// time is changed through PATCH /admin/v1/routes/{name},
// PORTICO_BENCH_CHANGES times (default 30) or until
// PORTICO_BENCH_CHANGE_SECONDS (default 90) have passed after at least 3,
// which keeps a run near 3 minutes while a change takes seconds; per
// change it measures the admin API's 2xx → the moment the last gateway
// ACKed every type at that version.
//
// Reported: p50/p99/max of that (target p99 < 2 s), the admin PATCH's own
// latency, the control plane's mean load+compile time per version
// (portico_controlplane_compile_seconds), the response bytes each gateway
// received per change, and for the load: the apply's answer time, the
// first compile and the time until every gateway held the config.
//
// Absolute numbers of the machine it runs on, gateways and control plane
// sharing its CPUs. Streams that failed (and were reopened, as Envoy does)
// are counted: on a starved machine keepalives and handshakes time out.
// PORTICO_BENCH_CPUPROFILE=<file> writes a CPU profile of the changes only
// (not the load), without go test's -cpuprofile.
//
//	go test -run '^$' -bench PropagationAtScale -benchtime 1x ./controlplane/
//	PORTICO_BENCH_ROUTES=1000 PORTICO_BENCH_CLIENTS=50 PORTICO_BENCH_CHANGES=50
func BenchmarkPropagationAtScale(b *testing.B) {
	nRoutes := benchEnvInt(b, "PORTICO_BENCH_ROUTES", 10_000)
	nClients := benchEnvInt(b, "PORTICO_BENCH_CLIENTS", 200)
	nChanges := benchEnvInt(b, "PORTICO_BENCH_CHANGES", 30)
	changeBudget := time.Duration(benchEnvInt(b, "PORTICO_BENCH_CHANGE_SECONDS", 90)) * time.Second

	p := tlstest.New(b)
	cp := cptest.Start(b, controlplane.Config{DatabaseURL: testdeps.Postgres(b),
		TLS: p.Files(b, identity.ControlPlane, "controlplane"), Logger: testLogger()})
	api := &scaleAdmin{base: "https://" + cp.Addrs.Admin, token: cp.Token,
		hc: &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{TLSClientConfig: p.ClientTLS(nil)}}}

	// The load: every resource in one version, as porticoctl apply sends it.
	items := scaleConfig(nRoutes)
	_, n0 := api.compileSeconds(b)
	start := time.Now()
	var applied admin.ApplyResponse
	code, _ := api.do(b, http.MethodPost, admin.Prefix+admin.ApplyPath, admin.ApplyRequest{Items: items},
		map[string]string{"Idempotency-Key": "bench-scale-load"}, &applied)
	applyTook := time.Since(start)
	if code != http.StatusCreated {
		b.Fatalf("config:apply of %d items: %d", len(items), code)
	}
	api.waitCompiles(b, n0+1)
	loadSum, _ := api.compileSeconds(b)
	b.Logf("%d routes, %d clusters: config:apply answered in %v (version %d), compiled %v after (%.0f ms load+compile)",
		nRoutes, max(nRoutes/10, 1), applyTook.Round(time.Millisecond), applied.Version, time.Since(start).Round(time.Millisecond), loadSum*1000)

	// The fleet connects to a loaded control plane, as gateways starting.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	notify := make(chan struct{}, 1)
	fleet := make([]*envoyClient, nClients)
	start = time.Now()
	for i := range fleet {
		name := fmt.Sprintf("gw-%03d", i)
		files := p.Load(b, identity.Gateway, name)
		cc, err := grpc.NewClient(cp.Addrs.XDS,
			grpc.WithTransportCredentials(credentials.NewTLS(files.ClientConfig(identity.Policy{Roles: []identity.Role{identity.ControlPlane}}))),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(envoyMaxRecvBytes)))
		if err != nil {
			b.Fatal(err)
		}
		defer cc.Close()
		fleet[i] = runEnvoyClient(ctx, cc, name, notify)
	}
	waitFleet(b, fleet, notify, applied.Version, 5*time.Minute)
	syncTook := time.Since(start)
	perType := fleet[0].bytesByType(applied.Version)
	b.Logf("%d gateways held version %d %v after connecting; one gateway received %s", nClients, applied.Version,
		syncTook.Round(time.Millisecond), perType)

	if f := os.Getenv("PORTICO_BENCH_CPUPROFILE"); f != "" {
		out, err := os.Create(f)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(out); err != nil {
			b.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); out.Close() }()
	}
	sum0, c0 := api.compileSeconds(b)
	var lat, patch []time.Duration
	var bytesPerClient []float64
	prev := applied.Version
	for b.Loop() {
		loopStart := time.Now()
		for i := range nChanges {
			if i >= 3 && time.Since(loopStart) > changeBudget {
				b.Logf("stopped after %d changes: %v spent", i, changeBudget)
				break
			}
			name := scaleRouteName((i * 997) % nRoutes)
			path := admin.Prefix + "/routes/" + name
			_, h := api.do(b, http.MethodGet, path, nil, nil, nil)
			t0 := time.Now()
			code, h := api.do(b, http.MethodPatch, path, map[string]any{"timeout": fmt.Sprintf("%ds", 10+i)},
				map[string]string{"If-Match": h.Get("ETag")}, nil)
			accepted := time.Now()
			if code != http.StatusOK {
				b.Fatalf("PATCH %s: %d", path, code)
			}
			v, err := strconv.ParseInt(h.Get("X-Portico-Config-Version"), 10, 64)
			if err != nil || v <= prev {
				b.Fatalf("PATCH %s: config version %q, want one after %d", path, h.Get("X-Portico-Config-Version"), prev)
			}
			prev = v
			last := waitFleet(b, fleet, notify, v, 3*time.Minute)
			lat = append(lat, max(last.Sub(accepted), 0))
			patch = append(patch, accepted.Sub(t0))
			var total int
			for _, c := range fleet {
				total += c.bytesAt(v)
			}
			bytesPerClient = append(bytesPerClient, float64(total)/float64(len(fleet)))
		}
	}
	sum1, c1 := api.compileSeconds(b)
	compileMs := (sum1 - sum0) / max(c1-c0, 1) * 1000

	pct := func(d []time.Duration, q float64) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[int(q*float64(len(s)-1))].Microseconds()) / 1000
	}
	var meanBytes float64
	for _, x := range bytesPerClient {
		meanBytes += x / float64(len(bytesPerClient))
	}
	b.Logf("%d changes of one route at %d routes, %d gateways: admin 2xx → last ACK p50 %.0f ms p99 %.0f ms max %.0f ms; "+
		"PATCH p50 %.0f ms; load+compile %.0f ms per version (%v versions); %.1f MiB to each gateway per change",
		len(lat), nRoutes, nClients, pct(lat, 0.5), pct(lat, 0.99), pct(lat, 1), pct(patch, 0.5), compileMs, c1-c0, meanBytes/(1<<20))
	b.ReportMetric(pct(lat, 0.5), "p50-ms")
	b.ReportMetric(pct(lat, 0.99), "p99-ms")
	b.ReportMetric(pct(lat, 1), "max-ms")
	b.ReportMetric(pct(patch, 0.5), "patch-p50-ms")
	b.ReportMetric(compileMs, "compile-ms")
	b.ReportMetric(meanBytes, "bytes/client/change")
	b.ReportMetric(applyTook.Seconds(), "apply-s")
	b.ReportMetric(syncTook.Seconds(), "sync-s")
	failed := 0
	for _, c := range fleet {
		failed += c.failedStreams()
	}
	if failed > 0 {
		b.Logf("%d ADS streams failed and were reopened (e.g. %s)", failed, fleet[0].status())
	}
	b.ReportMetric(float64(failed), "failed-streams")
}

// benchEnvInt reads a positive count from the environment (def when unset).
func benchEnvInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

// envoyMaxRecvBytes stands in for Envoy, which sets no limit of its own on
// an xDS response: gRPC's 4 MiB default is less than 10,000 routes.
const envoyMaxRecvBytes = 1 << 30

func scaleRouteName(i int) string { return fmt.Sprintf("r-%05d", i) }

// scaleConfig is a fleet's worth of config: one JWT provider, routes/10
// clusters of two endpoints, and routes spread ten to a host, each with its
// own path. Hosts are exact names (no wildcard), as most APIs are.
func scaleConfig(routes int) []admin.ApplyItem {
	clusters := max(routes/10, 1)
	var items []admin.ApplyItem
	add := func(kind string, res map[string]any) {
		raw, err := json.Marshal(res)
		if err != nil {
			panic(err) // maps of strings and numbers always marshal
		}
		items = append(items, admin.ApplyItem{Kind: spec.Kind(kind), Resource: raw})
	}
	add("jwt-providers", map[string]any{"name": "idp", "issuer": "https://idp.bench.test", "audiences": []string{"portico"},
		"jwksUri": "http://127.0.0.1:18950/jwks.json", "allowInsecureLoopback": true, "algorithms": []string{"RS256"}})
	for i := range clusters {
		c := map[string]any{"name": fmt.Sprintf("svc-%04d", i), "endpoints": []any{
			map[string]any{"address": fmt.Sprintf("10.%d.%d.1", i/250, i%250), "port": 8080},
			map[string]any{"address": fmt.Sprintf("10.%d.%d.2", i/250, i%250), "port": 8080},
		}}
		if i%5 == 0 {
			c["http2"] = true
		}
		if i%7 == 0 {
			c["circuitBreakers"] = map[string]any{"maxConnections": 512, "maxRequests": 1024}
		}
		add("clusters", c)
	}
	for i := range routes {
		host := fmt.Sprintf("api-%04d.bench.example.com", i/10)
		r := map[string]any{
			"name":    scaleRouteName(i),
			"match":   map[string]any{"hosts": []string{host}, "pathPrefix": fmt.Sprintf("/v1/resource-%d", i%10)},
			"cluster": fmt.Sprintf("svc-%04d", (i/10+i%3)%clusters),
		}
		if i%5 == 4 {
			r["match"].(map[string]any)["methods"] = []string{"GET", "HEAD"}
		}
		switch i % 4 {
		case 1:
			r["auth"] = map[string]any{"mode": "jwt", "provider": "idp", "requiredScopes": []string{"read"}}
		case 2:
			r["auth"] = map[string]any{"mode": "apikey"}
		}
		switch i % 10 {
		case 3:
			r["rateLimits"] = []any{map[string]any{"descriptors": []any{map[string]any{"key": "remote_address", "remoteAddress": true}}}}
		case 7:
			r["rateLimits"] = []any{map[string]any{"descriptors": []any{map[string]any{"key": "tenant", "fromHeader": "x-tenant"}}}}
		}
		if i%3 == 0 {
			r["timeout"] = "15s"
		}
		add("routes", r)
	}
	return items
}

// scaleAdmin talks to the admin API over TLS with the bootstrap token.
type scaleAdmin struct {
	base, token string
	hc          *http.Client
}

func (a *scaleAdmin) do(b *testing.B, method, path string, body any, hdr map[string]string, out any) (int, http.Header) {
	b.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			b.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, a.base+path, rd)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+a.token)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	if resp.StatusCode >= 300 {
		b.Logf("%s %s: %d %.2000s", method, path, resp.StatusCode, raw)
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			b.Fatalf("%s %s: %v", method, path, err)
		}
	}
	return resp.StatusCode, resp.Header
}

// compileSeconds reads portico_controlplane_compile_seconds' sum and count.
func (a *scaleAdmin) compileSeconds(b *testing.B) (sum, count float64) {
	b.Helper()
	resp, err := a.hc.Get(a.base + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for line := range strings.SplitSeq(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "portico_controlplane_compile_seconds_sum":
			sum = v
		case "portico_controlplane_compile_seconds_count":
			count = v
		}
	}
	return sum, count
}

// waitCompiles polls /metrics until n versions were compiled.
func (a *scaleAdmin) waitCompiles(b *testing.B, n float64) {
	b.Helper()
	xdstest.Eventually(b, 2*time.Minute, fmt.Sprintf("%v versions compiled", n), func() bool {
		_, c := a.compileSeconds(b)
		return c >= n
	})
}

// waitFleet waits until every client holds version v (or newer) of every
// type it subscribes to and returns when the last one got there.
func waitFleet(b *testing.B, fleet []*envoyClient, notify <-chan struct{}, v int64, d time.Duration) time.Time {
	b.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		var last time.Time
		behind := 0
		for _, c := range fleet {
			at, ok := c.heldAt(v)
			if !ok {
				behind++
				continue
			}
			if at.After(last) {
				last = at
			}
		}
		if behind == 0 {
			return last
		}
		select {
		case <-notify:
		case <-deadline.C:
			var ex []string
			for _, c := range fleet {
				if _, ok := c.heldAt(v); !ok && len(ex) < 3 {
					ex = append(ex, c.status())
				}
			}
			b.Fatalf("version %d: %d of %d gateways had not ACKed every type after %v; e.g. %s", v, behind, len(fleet), d, strings.Join(ex, "; "))
		}
	}
}

// envoyClient is an ADS client (state of the world) that subscribes as
// Envoy does: CDS and LDS wildcard, then EDS for the EDS clusters CDS
// returned and RDS for the route configurations the listeners name, each
// request repeating its names. It ACKs every response, as runADSClient
// does, and records when it held every subscribed type at which version.
// A stream that fails is reopened, as Envoy does, re-subscribing with the
// versions held; the benchmark reports how often that happened.
// Clusters and listeners are decoded only when their bytes changed, and
// route configurations never (nothing depends on them), so the clients
// take little of the CPU the control plane is measured on.
type envoyClient struct {
	id string
	mu sync.Mutex
	// acked is the last ACKed version per subscribed type (0: none yet).
	acked map[string]int64
	// held lists, in order, when the client first held every type at
	// least at a version.
	held []heldVersion
	// received counts response bytes per version and type.
	received map[int64]map[string]int
	// streamErrs counts failed streams; lastErr is the last failure.
	streamErrs int
	lastErr    error
	notify     chan<- struct{}
}

type heldVersion struct {
	version int64
	at      time.Time
}

// subscription is one type's request state on the stream.
type subscription struct {
	names          []string // nil: wildcard
	version, nonce string
	fingerprint    uint64 // of the last response's resources (CDS, LDS), in any order
}

// dependents: what a CDS or LDS response makes Envoy ask for next.
var dependents = map[string]struct {
	typeURL string
	names   func([]*anypb.Any) ([]string, error)
}{
	resource.ClusterType:  {resource.EndpointType, edsNames},
	resource.ListenerType: {resource.RouteType, rdsNames},
}

func runEnvoyClient(ctx context.Context, conn *grpc.ClientConn, id string, notify chan<- struct{}) *envoyClient {
	c := &envoyClient{id: id, acked: map[string]int64{resource.ClusterType: 0, resource.ListenerType: 0},
		received: map[int64]map[string]int{}, notify: notify}
	subs := map[string]*subscription{resource.ClusterType: {}, resource.ListenerType: {}}
	go func() {
		for {
			err := c.session(ctx, conn, subs)
			if ctx.Err() != nil {
				return
			}
			c.mu.Lock()
			c.streamErrs++
			c.lastErr = err
			c.mu.Unlock()
			select { // Envoy's retry back-off starts near 500ms
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return c
}

// session runs one ADS stream until it fails. subs carries the
// subscriptions over from the previous stream: the first requests name
// the versions held (with no nonce), as a reconnecting Envoy's do.
func (c *envoyClient) session(ctx context.Context, conn *grpc.ClientConn, subs map[string]*subscription) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	node := &corev3.Node{Id: c.id, Cluster: "portico-gateway", UserAgentName: "envoy"}
	for _, t := range []string{resource.ClusterType, resource.ListenerType, resource.EndpointType, resource.RouteType} {
		sub, ok := subs[t]
		if !ok {
			continue
		}
		sub.nonce = ""
		if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: t, ResourceNames: sub.names, VersionInfo: sub.version}); err != nil {
			return err
		}
		node = nil // only the first request carries it
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		typeURL := resp.GetTypeUrl()
		v, _ := strconv.ParseInt(resp.GetVersionInfo(), 10, 64)
		c.mu.Lock()
		if c.received[v] == nil {
			c.received[v] = map[string]int{}
		}
		c.received[v][typeURL] += proto.Size(resp)
		c.mu.Unlock()
		sub := subs[typeURL]
		if sub == nil {
			return fmt.Errorf("a response of %s, not subscribed to", typeURL)
		}
		if dep, ok := dependents[typeURL]; ok {
			// The server lists resources in map order: sum their hashes.
			var fp uint64
			for _, r := range resp.GetResources() {
				h := fnv.New64a()
				h.Write(r.GetValue())
				fp += h.Sum64()
			}
			if fp != sub.fingerprint {
				sub.fingerprint = fp
				names, err := dep.names(resp.GetResources())
				if err != nil {
					return err
				}
				next := subs[dep.typeURL]
				if next == nil {
					next = &subscription{}
					subs[dep.typeURL] = next
					c.mu.Lock()
					c.acked[dep.typeURL] = 0
					c.mu.Unlock()
				}
				if !slices.Equal(names, next.names) {
					next.names = names
					if err := stream.Send(&discovery.DiscoveryRequest{TypeUrl: dep.typeURL, ResourceNames: names,
						VersionInfo: next.version, ResponseNonce: next.nonce}); err != nil {
						return err
					}
				}
			}
		}
		sub.version, sub.nonce = resp.GetVersionInfo(), resp.GetNonce()
		if err := stream.Send(&discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: sub.names,
			VersionInfo: sub.version, ResponseNonce: sub.nonce}); err != nil {
			return err
		}
		c.ackedNow(typeURL, v)
	}
}

// status describes the client for a failure message.
func (c *envoyClient) status() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%s acked %v, %d failed streams (last: %v)", c.id, c.acked, c.streamErrs, c.lastErr)
}

// failedStreams is how many of the client's streams failed.
func (c *envoyClient) failedStreams() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streamErrs
}

// ackedNow records the ACK of version v of typeURL.
func (c *envoyClient) ackedNow(typeURL string, v int64) {
	now := time.Now()
	c.mu.Lock()
	c.acked[typeURL] = v
	low := int64(-1)
	for _, a := range c.acked {
		if low < 0 || a < low {
			low = a
		}
	}
	moved := low > 0 && (len(c.held) == 0 || low > c.held[len(c.held)-1].version)
	if moved {
		c.held = append(c.held, heldVersion{low, now})
	}
	c.mu.Unlock()
	if moved {
		select {
		case c.notify <- struct{}{}:
		default:
		}
	}
}

// heldAt returns when the client first held every type at version v or newer.
func (c *envoyClient) heldAt(v int64) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range c.held {
		if h.version >= v {
			return h.at, true
		}
	}
	return time.Time{}, false
}

// bytesAt is the response bytes the client received for version v.
func (c *envoyClient) bytesAt(v int64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, b := range c.received[v] {
		n += b
	}
	return n
}

// bytesByType describes the bytes received for version v per type.
func (c *envoyClient) bytesByType(v int64) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for _, t := range []string{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType} {
		parts = append(parts, fmt.Sprintf("%s %.2f MiB", t[strings.LastIndexByte(t, '.')+1:], float64(c.received[v][t])/(1<<20)))
	}
	return strings.Join(parts, ", ")
}

// edsNames lists the EDS service names of the EDS clusters, sorted.
func edsNames(res []*anypb.Any) ([]string, error) {
	var names []string
	for _, a := range res {
		var cl clusterv3.Cluster
		if err := a.UnmarshalTo(&cl); err != nil {
			return nil, err
		}
		if cl.GetType() != clusterv3.Cluster_EDS {
			continue
		}
		n := cl.GetEdsClusterConfig().GetServiceName()
		if n == "" {
			n = cl.GetName()
		}
		names = append(names, n)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// rdsNames lists the route configurations the listeners' HTTP connection
// managers load by RDS, sorted.
func rdsNames(res []*anypb.Any) ([]string, error) {
	var names []string
	for _, a := range res {
		var l listenerv3.Listener
		if err := a.UnmarshalTo(&l); err != nil {
			return nil, err
		}
		chains := l.GetFilterChains()
		if d := l.GetDefaultFilterChain(); d != nil {
			chains = append(chains, d)
		}
		for _, fc := range chains {
			for _, f := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if f.GetTypedConfig().MessageIs(&hcm) {
					if err := f.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
						return nil, err
					}
					if n := hcm.GetRds().GetRouteConfigName(); n != "" {
						names = append(names, n)
					}
				}
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}
