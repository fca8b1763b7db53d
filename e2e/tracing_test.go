package e2e_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/extauthz"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlstest"
	"github.com/portico-io/portico/internal/tracing"
	"github.com/portico-io/portico/internal/tracing/tracingtest"
	"github.com/portico-io/portico/internal/xdstest"
	"github.com/portico-io/portico/ratelimitsvc"
)

const (
	checkSpan = "envoy.service.auth.v3.Authorization/Check"
	limitSpan = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
)

// tracedServices are extauthz and ratelimitsvc over mutual TLS, with the
// tracing trc, and a gateway's clients of both.
type tracedServices struct {
	authz authv3.AuthorizationClient
	rls   rlsv3.RateLimitServiceClient
	stop  func() // stops both; their spans are flushed when it returns
}

func startTraced(t *testing.T, p *tlstest.PKI, xdsAddr, redisAddr string, trc tracing.Config) *tracedServices {
	t.Helper()
	ea, stopA := runStoppable(t, "extauthz", func(ctx context.Context, ready chan<- extauthz.Addrs) error {
		return extauthz.Run(ctx, extauthz.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", XDSAddr: xdsAddr, NodeID: "e2e-trace-extauthz",
			StateDir: t.TempDir(), XDSMinBackoff: 20 * time.Millisecond, XDSMaxBackoff: 200 * time.Millisecond, Logger: testLogger(),
			TLS: p.Files(t, identity.ExtAuthz, "extauthz-0"), Tracing: trc, Ready: ready})
	})
	rl, stopR := runStoppable(t, "ratelimitsvc", func(ctx context.Context, ready chan<- ratelimitsvc.Addrs) error {
		return ratelimitsvc.Run(ctx, ratelimitsvc.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", XDSAddr: xdsAddr, NodeID: "e2e-trace-ratelimit",
			StateDir: t.TempDir(), RedisAddr: redisAddr, RedisTimeout: 5 * time.Second, Logger: testLogger(),
			KeyPrefix: fmt.Sprintf("portico:e2e:%s:%d:", t.Name(), time.Now().UnixNano()),
			TLS:       p.Files(t, identity.RateLimit, "ratelimit-0"), Tracing: trc, Ready: ready})
	})
	gw := p.Files(t, identity.Gateway, "gateway-0")
	cert, err := tls.LoadX509KeyPair(gw.CertFile, gw.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	dial := func(addr string) *grpc.ClientConn {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(p.ClientTLS([]tls.Certificate{cert}))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	return &tracedServices{authz: authv3.NewAuthorizationClient(dial(ea.GRPC)), rls: rlsv3.NewRateLimitServiceClient(dial(rl.GRPC)),
		stop: func() { stopA(); stopR() }}
}

// runStoppable is runInProcess with a stop function that returns once Run
// has.
func runStoppable[A any](t *testing.T, name string, run func(ctx context.Context, ready chan<- A) error) (A, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan A, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, ready) }()
	var addrs A
	select {
	case addrs = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("%s exited before it was ready: %v", name, err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("%s not ready after 30s", name)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	t.Cleanup(stop)
	return addrs, stop
}

// newTraceparent is the W3C context of a sampled request span: its
// traceparent and the trace and span ids in hex.
func newTraceparent(t *testing.T) (header, traceID, spanID string) {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	traceID, spanID = hex.EncodeToString(b[:16]), hex.EncodeToString(b[16:])
	return "00-" + traceID + "-" + spanID + "-01", traceID, spanID
}

// One request through the e2e path: the gateway's ext_authz Check and its
// ShouldRateLimit carry the request's trace context in their metadata, as
// Envoy sends them when its connection manager traces. Both services'
// server spans reach an OTLP collector (the real protocol, over mutual
// TLS) under the request's trace id, children of the request's span, with
// the decision on them and no credential. A Check whose metadata carries
// no context continues the downstream request's traceparent header.
func TestTraceThroughExtauthzAndRateLimit(t *testing.T) {
	dbURL := testdeps.Postgres(t)
	redisAddr := testdeps.Redis(t)
	p := tlstest.New(t)
	collector := tracingtest.StartGRPC(t, tracingtest.ServerTLS(t, p))
	cp := startControlPlane(t, dbURL, controlplane.Config{TLS: p.Files(t, identity.ControlPlane, "controlplane")})
	svc := startTraced(t, p, cp.XDS, redisAddr, tracing.Config{Endpoint: collector.Endpoint, CAFile: p.CAFile(), BatchTimeout: 50 * time.Millisecond})

	api := newAdminAPITLS(t, cp.Admin, p.ClientTLS(nil))
	key, _ := api.seedKeyed()
	v := api.create("ratelimit-rules", map[string]any{"name": "per-consumer", "domain": "portico",
		"descriptors": []any{map[string]any{"key": "consumer"}}, "limit": 3, "window": "1h"}, nil)
	api.waitAcked("e2e-trace-extauthz", "portico-extauthz", v, extauthzTypes...)
	api.waitAcked("e2e-trace-ratelimit", "portico-ratelimit", v, ratelimitTypes...)

	// The request: Envoy's filters call with its context in the metadata;
	// the downstream request's own headers (in the CheckRequest) carry it
	// too.
	tp, traceID, requestSpan := newTraceparent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reqCtx := metadata.AppendToOutgoingContext(ctx, "traceparent", tp)
	check := keyedCheck(key)
	check.Attributes.Request.Http.Headers["traceparent"] = tp
	resp, err := svc.authz.Check(reqCtx, check)
	if err != nil || codes.Code(resp.GetStatus().GetCode()) != codes.OK {
		t.Fatalf("Check: %v, %v", resp.GetStatus(), err)
	}
	limit, err := svc.rls.ShouldRateLimit(reqCtx, &rlsv3.RateLimitRequest{Domain: "portico", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{
		{Entries: []*ratelimitcommonv3.RateLimitDescriptor_Entry{{Key: "consumer", Value: "acme"}}}}})
	if err != nil || limit.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit: %v, %v", limit.GetOverallCode(), err)
	}
	// A gateway that does not trace: only the downstream request's header.
	tp2, traceID2, requestSpan2 := newTraceparent(t)
	check = keyedCheck(key)
	check.Attributes.Request.Http.Headers["traceparent"] = tp2
	if _, err := svc.authz.Check(ctx, check); err != nil {
		t.Fatalf("Check without metadata: %v", err)
	}

	byTrace := func(id string) map[string]tracingtest.Span {
		out := map[string]tracingtest.Span{}
		for _, s := range collector.Spans() {
			if s.TraceID() == id {
				out[s.Service+" "+s.GetName()] = s
			}
		}
		return out
	}
	xdstest.Eventually(t, 10*time.Second, "three spans at the collector", func() bool { return len(collector.Spans()) >= 3 })
	spans := byTrace(traceID)
	ea, ok := spans["portico-extauthz "+checkSpan]
	rl, ok2 := spans["portico-ratelimitsvc "+limitSpan]
	if !ok || !ok2 || len(spans) != 2 {
		t.Fatalf("spans of trace %s: %v; want extauthz's Check and ratelimitsvc's ShouldRateLimit", traceID, keys(spans))
	}
	for _, s := range []tracingtest.Span{ea, rl} {
		if s.ParentID() != requestSpan || s.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
			t.Errorf("%s %s: parent %s kind %v; want the request's span %s, server", s.Service, s.GetName(), s.ParentID(), s.GetKind(), requestSpan)
		}
	}
	wantAttrs(t, ea, map[string]string{"portico.route": "keyed", "portico.authz.mode": "apikey", "portico.authz.decision": "allow",
		"portico.consumer": "acme", "portico.tenant": "acme", "rpc.response.status_code": "OK"})
	wantAttrs(t, rl, map[string]string{"portico.ratelimit.domain": "portico", "portico.ratelimit.descriptors": "1",
		"portico.ratelimit.code": "OK", "portico.consumer": "acme"})
	if fallback, ok := byTrace(traceID2)["portico-extauthz "+checkSpan]; !ok || fallback.ParentID() != requestSpan2 {
		t.Errorf("Check without metadata: no span under the request header's trace %s, parent %s (found %t)", traceID2, requestSpan2, ok)
	}

	// Only the RPCs Envoy makes are traced (not health, not xDS), and no
	// span carries the API key.
	for _, s := range collector.Spans() {
		if n := s.GetName(); n != checkSpan && n != limitSpan {
			t.Errorf("unexpected span %s from %s", n, s.Service)
		}
		for _, kv := range s.GetAttributes() {
			if strings.Contains(kv.String(), key) {
				t.Errorf("span %s attribute %s carries the API key", s.GetName(), kv.GetKey())
			}
		}
	}
}

func wantAttrs(t *testing.T, s tracingtest.Span, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if got, ok := s.Attr(k); !ok || got != w {
			t.Errorf("%s %s: attribute %s = %q, want %q", s.Service, s.GetName(), k, got, w)
		}
	}
}

func keys(m map[string]tracingtest.Span) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Tracing is off by default: with no endpoint configured, a request that
// carries a trace context is served, nothing is exported and no exporter
// even connects — not to the address the standard OTEL_* variables name.
func TestTracingOffExportsNothing(t *testing.T) {
	p := tlstest.New(t)
	collector := tracingtest.StartGRPC(t, tracingtest.ServerTLS(t, p))
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.Endpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", collector.Endpoint)
	// No control plane (extauthz denies: no policy) and in-memory buckets:
	// the calls only have to be served.
	svc := startTraced(t, p, "", "", tracing.Config{})
	tp, _, _ := newTraceparent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", tp)
	if _, err := svc.authz.Check(ctx, keyedCheck("k")); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if _, err := svc.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "portico"}); err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	svc.stop() // a provider that was on would flush here
	if n, c := len(collector.Spans()), collector.Conns(); n != 0 || c != 0 {
		t.Fatalf("tracing off: %d spans exported over %d connections, want none", n, c)
	}
}
