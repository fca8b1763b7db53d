package controlplane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/controlplane/cptest"
	"github.com/portico-io/portico/controlplane/store"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/xdstest"
)

// instance is one control plane run by the test, against dbURL.
type instance struct {
	addrs controlplane.Addrs
	token string // the bootstrap admin token
	stop  func()
}

// adminTokens maps a running instance's admin address to its bootstrap
// admin token; call sends it to that address.
var adminTokens sync.Map

func start(t testing.TB, dbURL, adminAddr, xdsAddr string) *instance {
	t.Helper()
	return startWith(t, controlplane.Config{AdminAddr: adminAddr, XDSAddr: xdsAddr, DatabaseURL: dbURL})
}

func startWith(t testing.TB, cfg controlplane.Config) *instance {
	t.Helper()
	cfg.Logger = testLogger()
	cp := cptest.Start(t, cfg)
	adminTokens.Store(cp.Addrs.Admin, cp.Token)
	return &instance{addrs: cp.Addrs, token: cp.Token, stop: cp.Stop}
}

// testLogger logs to stderr at debug level when PORTICO_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("PORTICO_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// call sends one admin request and decodes the JSON answer into out (if non-nil).
func call(t testing.TB, method, url string, body any, hdr map[string]string, out any) (int, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Content-Type", "application/json")
	if tok, ok := adminTokens.Load(req.URL.Host); ok {
		req.Header.Set("Authorization", "Bearer "+tok.(string))
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, url, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode, resp.Header
}

var keySeq atomic.Int64

func create(t testing.TB, admin, kind string, body any) int64 {
	t.Helper()
	var out map[string]any
	code, h := call(t, http.MethodPost, "http://"+admin+"/admin/v1/"+kind, body,
		map[string]string{"Idempotency-Key": fmt.Sprintf("k-%d", keySeq.Add(1))}, &out)
	if code != http.StatusCreated {
		t.Fatalf("POST %s: %d %v", kind, code, out)
	}
	v, _ := strconv.ParseInt(h.Get("X-Portico-Config-Version"), 10, 64)
	return v
}

func update(t testing.TB, admin, kind, name string, patch any) int64 {
	t.Helper()
	url := "http://" + admin + "/admin/v1/" + kind + "/" + name
	_, h := call(t, http.MethodGet, url, nil, nil, nil)
	var out map[string]any
	code, h := call(t, http.MethodPatch, url, patch, map[string]string{"If-Match": h.Get("ETag")}, &out)
	if code != http.StatusOK {
		t.Fatalf("PATCH %s/%s: %d %v", kind, name, code, out)
	}
	v, _ := strconv.ParseInt(h.Get("X-Portico-Config-Version"), 10, 64)
	return v
}

type nodeView struct {
	ID      string `json:"id"`
	Group   string `json:"group"`
	Replica string `json:"replica"`
	Types   map[string]struct {
		AckedVersion string `json:"ackedVersion"`
		Nack         *struct {
			Version string `json:"version"`
			Error   string `json:"error"`
		} `json:"nack"`
	} `json:"types"`
}

func nodesOf(t testing.TB, admin string) map[string]nodeView {
	t.Helper()
	var out struct {
		Items []nodeView `json:"items"`
	}
	if code, _ := call(t, http.MethodGet, "http://"+admin+"/admin/v1/nodes", nil, nil, &out); code != http.StatusOK {
		t.Fatalf("GET nodes: %d", code)
	}
	m := map[string]nodeView{}
	for _, n := range out.Items {
		m[n.ID] = n
	}
	return m
}

// The end-to-end path: admin API → Postgres version → snapshot →
// a real grpc-go xDS client routing RPCs, changes without reconnecting,
// NACK visible and not re-sent, rollback byte for byte.
func TestAdminToGRPCClient(t *testing.T) {
	dbURL := testdeps.Postgres(t)
	cp := start(t, dbURL, "127.0.0.1:0", "127.0.0.1:0")
	admin := cp.addrs.Admin
	a, b := xdstest.StartBackend(t, "a"), xdstest.StartBackend(t, "b")

	create(t, admin, "clusters", map[string]any{"name": "echo", "endpoints": []any{map[string]any{"address": "127.0.0.1", "port": a.Port}}})
	v := create(t, admin, "routes", map[string]any{"name": "echo", "match": map[string]any{"hosts": []string{"echo.grpc"}, "pathPrefix": "/"}, "cluster": "echo"})
	c := xdstest.Dial(t, cp.addrs.XDS, "grpc-1", "canary", "echo.grpc")
	if got := xdstest.Reached(c); got != "a" {
		t.Fatalf("RPC reached %q, want a; nodes: %+v latest %v", got, nodesOf(t, admin), metric(t, admin, "portico_controlplane_xds_latest_version"))
	}
	xdstest.Eventually(t, 5*time.Second, "CDS ACK", func() bool {
		return nodesOf(t, admin)["grpc-1"].Types[resource.ClusterType].AckedVersion == strconv.FormatInt(v, 10)
	})
	if n := nodesOf(t, admin)["grpc-1"]; n.Group != "canary" {
		t.Fatalf("node group %q, want canary", n.Group)
	}

	// An endpoint change reaches the client on its open stream.
	good := update(t, admin, "clusters", "echo", map[string]any{"endpoints": []any{map[string]any{"address": "127.0.0.1", "port": b.Port}}})
	xdstest.Eventually(t, 5*time.Second, "RPCs to reach b", func() bool { return xdstest.Reached(c) == "b" })

	// grpc-go cannot do MAGLEV: the version is NACKed, shown in /nodes, not
	// re-sent, and the client keeps routing on its last good config.
	bad := update(t, admin, "clusters", "echo", map[string]any{"lbPolicy": "MAGLEV"})
	badV := strconv.FormatInt(bad, 10)
	xdstest.Eventually(t, 5*time.Second, "the NACK in /admin/v1/nodes", func() bool {
		n := nodesOf(t, admin)["grpc-1"].Types[resource.ClusterType].Nack
		return n != nil && n.Version == badV && n.Error != ""
	})
	if got := xdstest.Reached(c); got != "b" {
		t.Fatalf("after NACK, RPC reached %q; want b", got)
	}
	nacks := func() float64 {
		return metric(t, admin, `portico_controlplane_xds_nacks_total{type="envoy.config.cluster.v3.Cluster"}`)
	}
	first := nacks()
	xdstest.Consistently(t, 300*time.Millisecond, "at most one more NACK (no re-send loop)", func() bool { return nacks() <= first+1 })

	// The next good version is ACKed.
	fixed := update(t, admin, "clusters", "echo", map[string]any{"lbPolicy": "ROUND_ROBIN"})
	xdstest.Eventually(t, 5*time.Second, "ACK of the fixed version", func() bool {
		return nodesOf(t, admin)["grpc-1"].Types[resource.ClusterType].AckedVersion == strconv.FormatInt(fixed, 10)
	})

	// Rollback to the good version reproduces it byte for byte at the xDS level.
	var rb struct {
		Version int64 `json:"version"`
	}
	code, _ := call(t, http.MethodPost, "http://"+admin+"/admin/v1/config/rollback", map[string]any{"toVersion": good},
		map[string]string{"Idempotency-Key": "rb-1"}, &rb)
	if code != http.StatusCreated || rb.Version != fixed+1 {
		t.Fatalf("rollback: %d version %d, want 201 and %d", code, rb.Version, fixed+1)
	}
	st, err := store.Open(context.Background(), store.Config{DatabaseURL: dbURL})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	old, rolled := compileAt(t, st, good), compileAt(t, st, rb.Version)
	for _, typeURL := range compile.TypeURLs {
		a, b := old.Resources(typeURL), rolled.Resources(typeURL)
		if len(a) != len(b) {
			t.Fatalf("%s: %d resources after rollback, %d before", typeURL, len(b), len(a))
		}
		for i := range a {
			ab, _ := proto.MarshalOptions{Deterministic: true}.Marshal(a[i])
			bb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(b[i])
			if !bytes.Equal(ab, bb) {
				t.Fatalf("%s[%d] differs after rollback", typeURL, i)
			}
		}
	}
	xdstest.Eventually(t, 5*time.Second, "ACK of the rollback version", func() bool {
		return nodesOf(t, admin)["grpc-1"].Types[resource.ClusterType].AckedVersion == strconv.FormatInt(rb.Version, 10)
	})
}

func compileAt(t testing.TB, st *store.Store, v int64) *compile.Snapshot {
	t.Helper()
	cfg, err := st.ConfigAt(context.Background(), v)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := compile.Compile(cfg, compile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// metric reads one sample from /metrics (0 when absent).
func metric(t testing.TB, admin, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for _, line := range bytes.Split(raw, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte(series+" ")); ok {
			f, _ := strconv.ParseFloat(string(rest), 64)
			return f
		}
	}
	return 0
}

// Clients keep their config while the control plane is down and converge
// on the changes made meanwhile once it is back.
func TestControlPlaneRestart(t *testing.T) {
	dbURL := testdeps.Postgres(t)
	cp := start(t, dbURL, "127.0.0.1:0", "127.0.0.1:0")
	a, b := xdstest.StartBackend(t, "a"), xdstest.StartBackend(t, "b")
	create(t, cp.addrs.Admin, "clusters", map[string]any{"name": "echo", "endpoints": []any{map[string]any{"address": "127.0.0.1", "port": a.Port}}})
	create(t, cp.addrs.Admin, "routes", map[string]any{"name": "echo", "match": map[string]any{"hosts": []string{"echo.grpc"}, "pathPrefix": "/"}, "cluster": "echo"})
	c := xdstest.Dial(t, cp.addrs.XDS, "grpc-1", "canary", "echo.grpc")
	if got := xdstest.Reached(c); got != "a" {
		t.Fatalf("RPC reached %q, want a", got)
	}
	cp.stop()
	for range 10 {
		if got := xdstest.Reached(c); got != "a" {
			t.Fatalf("control plane down: RPC reached %q, want a", got)
		}
	}
	// Another replica (same database) changes the config while this one is
	// down, then this one comes back on its old addresses.
	other := start(t, dbURL, "127.0.0.1:0", "127.0.0.1:0")
	update(t, other.addrs.Admin, "clusters", "echo", map[string]any{"endpoints": []any{map[string]any{"address": "127.0.0.1", "port": b.Port}}})
	other.stop()
	start(t, dbURL, cp.addrs.Admin, cp.addrs.XDS)
	xdstest.Eventually(t, 30*time.Second, "the client to converge after the restart", func() bool { return xdstest.Reached(c) == "b" })
}

// fetchAll returns the deterministic bytes of every resource of typeURL
// that the control plane at xdsAddr serves for version v (SotW ADS fetch).
func fetchAll(t *testing.T, xdsAddr, typeURL, v string) map[string][]byte {
	return fetchAs(t, xdsAddr, "", typeURL, v)
}

// fetchAs is fetchAll for a node with the given user agent ("envoy" for a proxy).
func fetchAs(t *testing.T, xdsAddr, userAgent, typeURL, v string) map[string][]byte {
	t.Helper()
	conn, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&discovery.DiscoveryRequest{Node: &corev3.Node{Id: "fetch-" + userAgent + xdsAddr, Cluster: "portico-gateway", UserAgentName: userAgent}, TypeUrl: typeURL}); err != nil {
		t.Fatal(err)
	}
	for {
		r, err := s.Recv()
		if err != nil {
			t.Fatalf("fetch %s from %s: %v", typeURL, xdsAddr, err)
		}
		if r.GetVersionInfo() != v {
			// An older version still being published: ACK and wait.
			_ = s.Send(&discovery.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
			continue
		}
		out := map[string][]byte{}
		for _, a := range r.GetResources() {
			m, err := a.UnmarshalNew()
			if err != nil {
				t.Fatal(err)
			}
			out[cache.GetResourceName(m)] = a.GetValue()
		}
		return out
	}
}

// Two replicas on one database serve byte-identical resources for the same
// version: compilation is deterministic and both follow the outbox.
func TestReplicasServeIdenticalSnapshots(t *testing.T) {
	dbURL := testdeps.Postgres(t)
	r1 := start(t, dbURL, "127.0.0.1:0", "127.0.0.1:0")
	r2 := start(t, dbURL, "127.0.0.1:0", "127.0.0.1:0")
	create(t, r1.addrs.Admin, "clusters", map[string]any{"name": "echo", "endpoints": []any{
		map[string]any{"address": "127.0.0.1", "port": 18900, "zone": "a"},
		map[string]any{"address": "127.0.0.2", "port": 18900, "zone": "b", "weight": 3}}})
	create(t, r2.addrs.Admin, "jwt-providers", map[string]any{"name": "idp", "issuer": "https://idp.test",
		"audiences": []string{"portico"}, "jwksUri": "http://127.0.0.1:18950/jwks.json", "allowInsecureLoopback": true, "algorithms": []string{"RS256"}})
	create(t, r1.addrs.Admin, "routes", map[string]any{"name": "echo", "match": map[string]any{"pathPrefix": "/echo"}, "cluster": "echo",
		"auth": map[string]any{"mode": "jwt", "provider": "idp", "requiredScopes": []string{"b", "a"}}})
	create(t, r2.addrs.Admin, "consumers", map[string]any{"name": "acme", "tenant": "acme"})
	v := strconv.FormatInt(create(t, r1.addrs.Admin, "ratelimit-rules", map[string]any{"name": "r", "domain": "portico",
		"descriptors": []any{map[string]any{"key": "consumer"}}, "limit": 5, "window": "1s"}), 10)
	for _, typeURL := range compile.TypeURLs {
		a, b := fetchAll(t, r1.addrs.XDS, typeURL, v), fetchAll(t, r2.addrs.XDS, typeURL, v)
		if len(a) != len(b) {
			t.Fatalf("%s: %d vs %d resources", typeURL, len(a), len(b))
		}
		for k := range a {
			if !bytes.Equal(a[k], b[k]) {
				t.Fatalf("%s: replicas serve different bytes for %s", typeURL, k)
			}
		}
	}
}

// Envoy proxies are not sent the API listeners meant for proxyless gRPC
// clients (Envoy takes those only from its bootstrap); gRPC clients are.
func TestProxyViewOmitsAPIListeners(t *testing.T) {
	cp := start(t, testdeps.Postgres(t), "127.0.0.1:0", "127.0.0.1:0")
	create(t, cp.addrs.Admin, "clusters", map[string]any{"name": "echo", "endpoints": []any{map[string]any{"address": "127.0.0.1", "port": 18900}}})
	v := strconv.FormatInt(create(t, cp.addrs.Admin, "routes", map[string]any{"name": "echo",
		"match": map[string]any{"hosts": []string{"echo.grpc"}, "pathPrefix": "/"}, "cluster": "echo"}), 10)
	envoy := fetchAs(t, cp.addrs.XDS, "envoy", resource.ListenerType, v)
	grpcClient := fetchAs(t, cp.addrs.XDS, "gRPC Go", resource.ListenerType, v)
	if _, ok := envoy["ingress_http"]; !ok || len(envoy) != 1 {
		t.Fatalf("Envoy got listeners %v, want only ingress_http", slices.Collect(maps.Keys(envoy)))
	}
	if _, ok := grpcClient["echo.grpc"]; !ok {
		t.Fatalf("gRPC client got listeners %v, want echo.grpc among them", slices.Collect(maps.Keys(grpcClient)))
	}
}

// The admin API of any replica lists every replica's xDS clients; a
// replica that stops takes its clients out of the list.
func TestNodesAcrossReplicas(t *testing.T) {
	dbURL := testdeps.Postgres(t)
	r1 := startWith(t, controlplane.Config{AdminAddr: "127.0.0.1:0", XDSAddr: "127.0.0.1:0", DatabaseURL: dbURL, ReplicaID: "replica-1"})
	r2 := startWith(t, controlplane.Config{AdminAddr: "127.0.0.1:0", XDSAddr: "127.0.0.1:0", DatabaseURL: dbURL, ReplicaID: "replica-2"})
	a := xdstest.StartBackend(t, "a")
	create(t, r1.addrs.Admin, "clusters", map[string]any{"name": "echo", "endpoints": []any{map[string]any{"address": "127.0.0.1", "port": a.Port}}})
	v := strconv.FormatInt(create(t, r1.addrs.Admin, "routes", map[string]any{"name": "echo",
		"match": map[string]any{"hosts": []string{"echo.grpc"}, "pathPrefix": "/"}, "cluster": "echo"}), 10)
	c := xdstest.Dial(t, r1.addrs.XDS, "grpc-1", "canary", "echo.grpc")
	if got := xdstest.Reached(c); got != "a" {
		t.Fatalf("RPC reached %q", got)
	}
	xdstest.Eventually(t, 15*time.Second, "replica-2 to list the client of replica-1 with its ACK", func() bool {
		n, ok := nodesOf(t, r2.addrs.Admin)["grpc-1"]
		return ok && n.Replica == "replica-1" && n.Types[resource.ClusterType].AckedVersion == v
	})
	r1.stop()
	xdstest.Eventually(t, 15*time.Second, "the stopped replica's client to leave the list", func() bool {
		_, ok := nodesOf(t, r2.addrs.Admin)["grpc-1"]
		return !ok
	})
}
