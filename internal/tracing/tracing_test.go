package tracing

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlstest"
	"github.com/portico-io/portico/internal/tracing/tracingtest"
	"github.com/portico-io/portico/internal/xdstest"
)

const (
	traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentID = "00f067aa0ba902b7"
	otherID  = "1111111111111111"
)

func traceparent(span string, sampled bool) string {
	flags := "01"
	if !sampled {
		flags = "00"
	}
	return "00-" + traceID + "-" + span + "-" + flags
}

func TestOffIsNoop(t *testing.T) {
	// An exporter would pick this variable up; off, none is built.
	r := tracingtest.StartGRPC(t, tracingtest.ServerTLS(t, tlstest.New(t)))
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.Endpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", r.Endpoint)
	reg := prometheus.NewRegistry()
	p, err := New(context.Background(), Config{Registerer: reg, MetricPrefix: "portico_test"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Enabled() || p.ServerOptions(nil) != nil {
		t.Fatal("tracing on without an endpoint")
	}
	_, span := p.tracer.Start(context.Background(), "x")
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Fatal("the tracer of a provider that is off records")
	}
	span.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("%d metrics registered (%v), want none while off", n, err)
	}
	if r.Conns() != 0 {
		t.Fatalf("%d connections to the collector while tracing is off", r.Conns())
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{Protocol: "thrift"},
		{SampleRatio: 1.5},
		{SampleRatio: -0.5},
		{Endpoint: "collector:4317"},
		{Endpoint: "ftp://collector:4317"},
		{Endpoint: "https://"},
		{Endpoint: "https://collector:4317/v1/traces"},
		{Endpoint: "http://collector:4317", CAFile: "/ca.crt"},
		{Endpoint: "https://collector:4317", CAFile: filepath.Join(t.TempDir(), "missing.crt")},
	} {
		if _, err := New(context.Background(), c); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v): %v, want ErrConfig", c, err)
		}
	}
}

// The server span continues the metadata's context, else the request's;
// unsampled callers are not traced, health checks never; a server fault
// marks the span; Shutdown flushes what the batcher still holds.
func TestServerSpans(t *testing.T) {
	p := tlstest.New(t)
	r := tracingtest.StartGRPC(t, tracingtest.ServerTLS(t, p))
	prov, err := New(context.Background(), Config{Endpoint: r.Endpoint, CAFile: p.CAFile(), Workload: p.Load(t, identity.ExtAuthz, "extauthz-0"),
		ServiceName: "portico-test", InstanceID: "test-0", BatchTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(prov.ServerOptions(nil)) != 1 {
		t.Fatal("no server options while tracing is on")
	}
	// The request message carries headers (e.g. a CheckRequest's).
	type request struct{ headers map[string]string }
	intercept := prov.unaryInterceptor(func(req any) propagation.TextMapCarrier {
		if r, ok := req.(request); ok {
			return propagation.MapCarrier(r.headers)
		}
		return nil
	})
	call := func(name string, md metadata.MD, req request, fail error) {
		t.Helper()
		ctx := metadata.NewIncomingContext(context.Background(), md)
		method := "/test.Svc/" + name
		if name == "Check" {
			method = "/grpc.health.v1.Health/Check"
		}
		_, err := intercept(ctx, req, &grpc.UnaryServerInfo{FullMethod: method}, func(ctx context.Context, _ any) (any, error) {
			if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
				sp.SetAttributes(RouteKey.String("r-" + name))
			}
			return nil, fail
		})
		if !errors.Is(err, fail) {
			t.Fatalf("%s: handler error %v lost", name, err)
		}
	}
	call("Metadata", metadata.Pairs("traceparent", traceparent(parentID, true), "baggage", "k=v"), request{}, nil)
	call("Fallback", nil, request{map[string]string{"traceparent": traceparent(otherID, true)}}, nil)
	call("MetadataWins", metadata.Pairs("traceparent", traceparent(parentID, true)), request{map[string]string{"traceparent": traceparent(otherID, true)}}, nil)
	call("Root", nil, request{}, nil)
	call("Unsampled", metadata.Pairs("traceparent", traceparent(parentID, false)), request{}, nil)
	call("Check", metadata.Pairs("traceparent", traceparent(parentID, true)), request{}, nil)
	call("Fault", metadata.Pairs("traceparent", traceparent(parentID, true)), request{}, status.Error(codes.Internal, "boom"))
	call("Refused", metadata.Pairs("traceparent", traceparent(parentID, true)), request{}, status.Error(codes.InvalidArgument, "bad"))

	if n := len(r.Spans()); n != 0 {
		t.Fatalf("%d spans exported before the batch timeout or shutdown", n)
	}
	if err := prov.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := map[string]tracingtest.Span{}
	for _, s := range r.Spans() {
		got[s.GetName()] = s
	}
	if len(got) != 6 {
		t.Fatalf("spans %v, want Metadata, Fallback, MetadataWins, Root, Fault and Refused", names(got))
	}
	for name, parent := range map[string]string{"Metadata": parentID, "Fallback": otherID, "MetadataWins": parentID, "Fault": parentID, "Refused": parentID} {
		s := got["test.Svc/"+name]
		if s.TraceID() != traceID || s.ParentID() != parent {
			t.Errorf("%s: trace %s parent %s, want %s %s", name, s.TraceID(), s.ParentID(), traceID, parent)
		}
	}
	root := got["test.Svc/Root"]
	if root.ParentID() != "" || root.TraceID() == traceID || len(root.GetTraceId()) != 16 {
		t.Errorf("Root: trace %s parent %q, want a new trace", root.TraceID(), root.ParentID())
	}
	s := got["test.Svc/Metadata"]
	if s.Service != "portico-test" || s.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("Metadata span: service %q kind %v", s.Service, s.GetKind())
	}
	for k, want := range map[string]string{"rpc.system.name": "grpc", "rpc.method": "test.Svc/Metadata", "rpc.response.status_code": "OK", "portico.route": "r-Metadata"} {
		if v, _ := s.Attr(k); v != want {
			t.Errorf("Metadata span: %s = %q, want %q", k, v, want)
		}
	}
	if f := got["test.Svc/Fault"]; f.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("Fault span status %v, want error", f.GetStatus())
	} else if v, _ := f.Attr("rpc.response.status_code"); v != "INTERNAL" {
		t.Errorf("Fault span status code %q", v)
	}
	if f := got["test.Svc/Refused"]; f.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Error("a caller's error (InvalidArgument) marks the server span as failed")
	}
}

func names(m map[string]tracingtest.Span) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// OTLP/HTTP over mutual TLS, exported within the batch timeout and counted.
func TestHTTPExport(t *testing.T) {
	p := tlstest.New(t)
	r := tracingtest.StartHTTP(t, tracingtest.ServerTLS(t, p))
	reg := prometheus.NewRegistry()
	prov, err := New(context.Background(), Config{Endpoint: r.Endpoint, Protocol: ProtocolHTTP, CAFile: p.CAFile(),
		Workload: p.Load(t, identity.RateLimit, "ratelimit-0"), ServiceName: "portico-test", BatchTimeout: 20 * time.Millisecond,
		Registerer: reg, MetricPrefix: "portico_test"})
	if err != nil {
		t.Fatal(err)
	}
	defer prov.Shutdown(context.Background())
	_, span := prov.tracer.Start(context.Background(), "one")
	span.End()
	xdstest.Eventually(t, 10*time.Second, "the span at the HTTP receiver", func() bool { return len(r.Spans()) == 1 })
	xdstest.Eventually(t, 5*time.Second, "the export counted", func() bool {
		return counter(t, reg, "portico_test_tracing_spans_exported_total") == 1
	})
}

// A collector that is down fails exports (counted, spans dropped), never
// the service.
func TestCollectorDown(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	reg := prometheus.NewRegistry()
	prov, err := New(context.Background(), Config{Endpoint: "http://" + addr, ExportTimeout: 100 * time.Millisecond,
		Registerer: reg, MetricPrefix: "portico_test"})
	if err != nil {
		t.Fatal(err)
	}
	_, span := prov.tracer.Start(context.Background(), "lost")
	span.End()
	_ = prov.Shutdown(context.Background())
	if got := counter(t, reg, "portico_test_tracing_export_failures_total"); got != 1 {
		t.Fatalf("export failures %v, want 1", got)
	}
}

func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
