// Package tracingtest runs an OTLP trace receiver for tests: the real
// protocol (the collector's TraceService over gRPC, or OTLP/HTTP with
// protobuf bodies), over mutual TLS, keeping every span it is sent and
// counting the connections it accepts.
package tracingtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlstest"
)

// Span is one received span and the service.name of its resource.
type Span struct {
	Service string
	*tracepb.Span
}

// TraceID returns the span's trace id in hex, as in a traceparent.
func (s Span) TraceID() string { return hex.EncodeToString(s.GetTraceId()) }

// SpanID returns the span's id in hex.
func (s Span) SpanID() string { return hex.EncodeToString(s.GetSpanId()) }

// ParentID returns the span's parent id in hex ("" for a root).
func (s Span) ParentID() string { return hex.EncodeToString(s.GetParentSpanId()) }

// Attr returns the string form of attribute key, and whether it is set.
func (s Span) Attr(key string) (string, bool) {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return value(kv.GetValue()), true
		}
	}
	return "", false
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	default:
		return v.String()
	}
}

// Receiver is a running OTLP receiver. Safe for concurrent use.
type Receiver struct {
	// Endpoint is the URL exporters are given (https://127.0.0.1:port).
	Endpoint string
	conns    atomic.Int64
	mu       sync.Mutex
	spans    []Span
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Conns returns how many connections the receiver has accepted.
func (r *Receiver) Conns() int64 { return r.conns.Load() }

func (r *Receiver) add(req *collectorpb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		var svc string
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				svc = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r.spans = append(r.spans, Span{Service: svc, Span: sp})
			}
		}
	}
}

// ServerTLS is a collector's TLS configuration from p: a certificate for
// localhost and 127.0.0.1, and a client certificate from p's CA required.
func ServerTLS(t testing.TB, p *tlstest.PKI) *tls.Config {
	t.Helper()
	f := p.Files(t, identity.Operator, "otel-collector")
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(p.CA.Cert)
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
}

// StartGRPC serves the OTLP TraceService over gRPC with tc on a loopback
// port until the test ends.
func StartGRPC(t testing.TB, tc *tls.Config) *Receiver {
	t.Helper()
	r, lis := listen(t)
	s := grpc.NewServer(grpc.Creds(credentials.NewTLS(tc)))
	collectorpb.RegisterTraceServiceServer(s, traceService{r: r})
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return r
}

// StartHTTP serves OTLP/HTTP (protobuf bodies, POST /v1/traces) with tc
// on a loopback port until the test ends.
func StartHTTP(t testing.TB, tc *tls.Config) *Receiver {
	t.Helper()
	r, lis := listen(t)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(io.LimitReader(req.Body, 16<<20))
		var msg collectorpb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &msg)
		}
		if err != nil || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "bad OTLP request", http.StatusBadRequest)
			return
		}
		r.add(&msg)
		out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(tls.NewListener(lis, tc)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

func listen(t testing.TB) (*Receiver, net.Listener) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{Endpoint: "https://" + lis.Addr().String()}
	return r, countingListener{Listener: lis, n: &r.conns}
}

type traceService struct {
	collectorpb.UnimplementedTraceServiceServer
	r *Receiver
}

func (s traceService) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	s.r.add(req)
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}
