package tracing

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// RequestCarrier returns the trace context a request message carries
// (e.g. the downstream HTTP headers inside an ext_authz CheckRequest), or
// nil when it carries none. It only reads req.
type RequestCarrier func(req any) propagation.TextMapCarrier

// healthPrefix names the gRPC health service, whose probes are not traced.
const healthPrefix = "/grpc.health.v1.Health/"

// ServerOptions returns the gRPC server options that trace the server's
// unary RPCs (health checks excluded), or nil when tracing is off. Each
// RPC gets a server span named after its method, continuing the trace
// context of the call's metadata or, when the metadata has none, of the
// request message (fromRequest, which may be nil). Handlers find the span
// with trace.SpanFromContext.
//
// OpenTelemetry's otelgrpc starts its span before the request message is
// decoded, so it could not continue a context found in the message: this
// interceptor is the part of it Portico needs.
func (p *Provider) ServerOptions(fromRequest RequestCarrier) []grpc.ServerOption {
	if !p.Enabled() {
		return nil
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(p.unaryInterceptor(fromRequest))}
}

func (p *Provider) unaryInterceptor(fromRequest RequestCarrier) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if strings.HasPrefix(info.FullMethod, healthPrefix) {
			return handler(ctx, req)
		}
		ctx, span := p.startServerSpan(ctx, req, info.FullMethod, fromRequest)
		defer span.End()
		resp, err := handler(ctx, req)
		c := status.Code(err)
		span.SetAttributes(semconv.RPCResponseStatusCodeKey.String(rpccode.Code(c).String()))
		if serverFault(c) {
			span.SetStatus(codes.Error, status.Convert(err).Message())
		}
		return resp, err
	}
}

// startServerSpan starts the span of one RPC, a child of the caller's
// context: the metadata's, else the request's.
func (p *Provider) startServerSpan(ctx context.Context, req any, fullMethod string, fromRequest RequestCarrier) (context.Context, trace.Span) {
	md, _ := metadata.FromIncomingContext(ctx)
	parent := p.prop.Extract(ctx, mdCarrier(md))
	if !trace.SpanContextFromContext(parent).IsValid() && fromRequest != nil {
		if c := fromRequest(req); c != nil {
			parent = p.prop.Extract(ctx, c)
		}
	}
	method := strings.TrimPrefix(fullMethod, "/")
	return p.tracer.Start(parent, method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(semconv.RPCSystemNameGRPC, semconv.RPCMethod(method)))
}

// serverFault reports whether c is the server's failure rather than the
// caller's (OpenTelemetry's gRPC conventions for server spans).
func serverFault(c grpccodes.Code) bool {
	switch c {
	case grpccodes.Unknown, grpccodes.DeadlineExceeded, grpccodes.Unimplemented, grpccodes.Internal, grpccodes.Unavailable, grpccodes.DataLoss:
		return true
	}
	return false
}

// mdCarrier reads a trace context from incoming gRPC metadata (keys are
// lowercase there, as W3C header names are compared).
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set is never called: the carrier is only extracted from.
func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
