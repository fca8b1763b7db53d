// Package tracing gives a Portico service OpenTelemetry tracing that is off
// unless an OTLP endpoint is configured. Off, it costs nothing: no
// exporter, no interceptor, a no-op tracer, and nothing ever dials out. On,
// it builds a TracerProvider of the service's own (never the global one:
// several services may share a process, as in the e2e tests) that batches
// spans to an OTLP collector over gRPC or HTTP, and gRPC server options
// that give every unary RPC a server span continuing the caller's W3C
// trace context (traceparent, tracestate, baggage).
//
// Envoy, when its HTTP connection manager traces, injects the request's
// context into the metadata of its ext_authz and rate-limit gRPC calls;
// a service may also name where else a request carries the downstream
// request's headers (extauthz: CheckRequest.attributes.request.http), used
// when the metadata has none. The sampler follows the caller's sampled
// flag, so Envoy decides which requests are traced; SampleRatio applies to
// the traces a service starts itself.
//
// Spans carry routes, decisions and consumer names, never credentials:
// handlers add their attributes with trace.SpanFromContext(ctx), checking
// IsRecording first so an untraced request pays nothing.
package tracing

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/credentials"

	"github.com/portico-io/portico/internal/tlsfiles"
)

// Protocols an exporter speaks (the values of OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Defaults for Config.
const (
	DefaultProtocol        = ProtocolGRPC
	DefaultSampleRatio     = 1.0
	DefaultBatchTimeout    = 5 * time.Second
	DefaultExportTimeout   = 10 * time.Second
	DefaultShutdownTimeout = 5 * time.Second
	// SampleNone as Config.SampleRatio starts no trace: only requests whose
	// caller sampled them are traced.
	SampleNone = -1.0
	// httpTracesPath is where an OTLP/HTTP endpoint given without a path
	// takes traces (the OTLP specification's default).
	httpTracesPath = "/v1/traces"
)

// Attribute keys the services share.
const (
	RouteKey    = attribute.Key("portico.route")
	ConsumerKey = attribute.Key("portico.consumer")
	TenantKey   = attribute.Key("portico.tenant")
)

// Config configures New. The zero value is tracing off; other zero values
// take the defaults.
type Config struct {
	// Endpoint is the collector's OTLP URL: https://collector:4317 for
	// gRPC, https://collector:4318 (path default /v1/traces) for HTTP.
	// Empty turns tracing off. An http:// URL exports in plaintext, which
	// New logs as a warning.
	Endpoint string
	// Protocol is ProtocolGRPC (default) or ProtocolHTTP.
	Protocol string
	// SampleRatio is the share of the traces this service starts itself
	// (requests without a trace context) that are sampled, in (0, 1]
	// (default DefaultSampleRatio); SampleNone starts none. A request with
	// a trace context follows its caller's sampled flag.
	SampleRatio float64
	// ServiceName and InstanceID become the resource's service.name and
	// service.instance.id (OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME,
	// when set, override them).
	ServiceName, InstanceID string
	// CAFile is the CA bundle an https endpoint's certificate must chain
	// to (default: the system's roots); the endpoint's host name is
	// verified, as for Redis. Workload, when set, is presented as the
	// client certificate when the collector asks for one (reloads
	// included).
	CAFile   string
	Workload *tlsfiles.Files
	// BatchTimeout is the longest a span waits before it is sent
	// (default DefaultBatchTimeout); ExportTimeout bounds one export
	// (default DefaultExportTimeout); ShutdownTimeout bounds the flush at
	// Shutdown (default DefaultShutdownTimeout).
	BatchTimeout, ExportTimeout, ShutdownTimeout time.Duration
	Logger                                       *slog.Logger
	// Registerer receives <MetricPrefix>_tracing_spans_exported_total and
	// <MetricPrefix>_tracing_export_failures_total when tracing is on; nil
	// registers nowhere.
	Registerer   prometheus.Registerer
	MetricPrefix string
}

// Enabled reports whether c turns tracing on.
func (c Config) Enabled() bool { return c.Endpoint != "" }

func (c *Config) defaults() {
	if c.Protocol == "" {
		c.Protocol = DefaultProtocol
	}
	if c.SampleRatio == 0 {
		c.SampleRatio = DefaultSampleRatio
	}
	if c.BatchTimeout <= 0 {
		c.BatchTimeout = DefaultBatchTimeout
	}
	if c.ExportTimeout <= 0 {
		c.ExportTimeout = DefaultExportTimeout
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// validate checks c after defaults; the endpoint only when tracing is on.
func (c *Config) validate() (*url.URL, error) {
	if c.Protocol != ProtocolGRPC && c.Protocol != ProtocolHTTP {
		return nil, fmt.Errorf("%w: protocol %q: want %s or %s", ErrConfig, c.Protocol, ProtocolGRPC, ProtocolHTTP)
	}
	if c.SampleRatio != SampleNone && (c.SampleRatio < 0 || c.SampleRatio > 1) {
		return nil, fmt.Errorf("%w: sample ratio %v: want 0 to 1", ErrConfig, c.SampleRatio)
	}
	if !c.Enabled() {
		return nil, nil
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("%w: endpoint: %w", ErrConfig, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: endpoint %q: want http(s)://host:port", ErrConfig, c.Endpoint)
	}
	if c.Protocol == ProtocolGRPC && u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("%w: endpoint %q: a gRPC endpoint has no path", ErrConfig, c.Endpoint)
	}
	if u.Scheme == "http" && c.CAFile != "" {
		return nil, fmt.Errorf("%w: a CA file for the plaintext endpoint %q", ErrConfig, c.Endpoint)
	}
	return u, nil
}

// Provider is one service's tracing: a TracerProvider and the propagators
// it continues traces with. Safe for concurrent use.
type Provider struct {
	cfg    Config
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	// sdk is nil when tracing is off.
	sdk *sdktrace.TracerProvider
}

// New returns the provider cfg describes: a no-op one when cfg.Endpoint is
// empty. The exporter connects lazily, at the first export; a collector
// that is down costs failed exports (logged, counted, spans dropped),
// never a failed start. The caller MUST call Shutdown to flush.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	cfg.defaults()
	u, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	p := &Provider{cfg: cfg, prop: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}
	if !cfg.Enabled() {
		p.tracer = noop.NewTracerProvider().Tracer(instrumentation)
		return p, nil
	}
	exp, err := newExporter(ctx, cfg, u)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer, cfg.MetricPrefix)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, err
	}
	res, err := resource.New(ctx, resource.WithSchemaURL(semconv.SchemaURL), resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(cfg.ServiceName), semconv.ServiceInstanceID(cfg.InstanceID)), resource.WithFromEnv())
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("%w: resource: %w", ErrConfig, err)
	}
	root := sdktrace.TraceIDRatioBased(cfg.SampleRatio)
	if cfg.SampleRatio == SampleNone {
		root = sdktrace.NeverSample()
	}
	p.sdk = sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(root)),
		sdktrace.WithBatcher(&reportingExporter{SpanExporter: exp, m: m, log: cfg.Logger},
			sdktrace.WithBatchTimeout(cfg.BatchTimeout), sdktrace.WithExportTimeout(cfg.ExportTimeout)),
	)
	p.tracer = p.sdk.Tracer(instrumentation)
	if u.Scheme == "http" {
		cfg.Logger.Warn("tracing: PLAINTEXT: spans (routes, consumers, decisions) go to the collector unencrypted; use an https endpoint", "endpoint", cfg.Endpoint)
	}
	cfg.Logger.Info("tracing: exporting spans", "endpoint", cfg.Endpoint, "protocol", cfg.Protocol, "sample_ratio", cfg.SampleRatio)
	return p, nil
}

// instrumentation names the tracer the spans come from.
const instrumentation = "github.com/portico-io/portico/internal/tracing"

// Enabled reports whether spans are exported.
func (p *Provider) Enabled() bool { return p.sdk != nil }

// Shutdown flushes the spans not yet exported and stops the exporter,
// within ShutdownTimeout even when ctx is already done (as it is when a
// service stops); failures are logged and returned. Spans ended after it
// are dropped.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.sdk == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.ShutdownTimeout)
	defer cancel()
	if err := p.sdk.Shutdown(ctx); err != nil {
		p.cfg.Logger.Warn("tracing: spans lost at shutdown", "err", err)
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// newExporter builds the OTLP exporter for u. Options the code sets win
// over OTEL_EXPORTER_OTLP_* variables; those it does not set (headers,
// compression, retry) still come from them, so a collector's token can
// be given as OTEL_EXPORTER_OTLP_HEADERS without appearing in ps.
func newExporter(ctx context.Context, cfg Config, u *url.URL) (sdktrace.SpanExporter, error) {
	var tc *tls.Config
	if u.Scheme == "https" {
		var err error
		if tc, err = clientTLS(cfg); err != nil {
			return nil, err
		}
	}
	switch cfg.Protocol {
	case ProtocolHTTP:
		path := u.Path
		if path == "" || path == "/" {
			path = httpTracesPath
		}
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(u.Host), otlptracehttp.WithURLPath(path), otlptracehttp.WithTimeout(cfg.ExportTimeout)}
		if tc != nil {
			opts = append(opts, otlptracehttp.WithTLSClientConfig(tc))
		} else {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		return otlptracehttp.New(ctx, opts...)
	default:
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(u.Host), otlptracegrpc.WithTimeout(cfg.ExportTimeout)}
		if tc != nil {
			opts = append(opts, otlptracegrpc.WithTLSCredentials(credentials.NewTLS(tc)))
		} else {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		return otlptracegrpc.New(ctx, opts...)
	}
}

// clientTLS verifies the collector as ratelimitsvc verifies Redis: its
// chain against CAFile (default: the system's roots) and its host name;
// the workload's certificate is presented when the collector asks.
func clientTLS(cfg Config) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: collector CA: %w", ErrConfig, err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: collector CA %s holds no PEM certificate", ErrConfig, cfg.CAFile)
		}
	}
	if cfg.Workload != nil {
		c.GetClientCertificate = cfg.Workload.GetClientCertificate
	}
	return c, nil
}
