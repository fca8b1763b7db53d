package tracing

import (
	"flag"

	"github.com/portico-io/portico/internal/envflag"
)

// Flags are the tracing flags of a service binary.
type Flags struct {
	Endpoint, Protocol, ServiceName, CAFile *string
	SampleRatio                             *float64
}

// RegisterFlags defines --tracing-endpoint, --tracing-protocol,
// --tracing-sample-ratio, --tracing-service-name and --tracing-ca-file
// (env PORTICO_TRACING_ENDPOINT, PORTICO_TRACING_PROTOCOL,
// PORTICO_TRACING_SAMPLE_RATIO, PORTICO_TRACING_SERVICE_NAME,
// PORTICO_TRACING_CA_FILE) on fs; serviceName is the default service.name.
func RegisterFlags(fs *flag.FlagSet, serviceName string) *Flags {
	return &Flags{
		Endpoint: envflag.String(fs, "tracing-endpoint", "PORTICO_TRACING_ENDPOINT", "",
			"OTLP collector URL, e.g. https://otel-collector:4317 (gRPC) or https://otel-collector:4318 (HTTP, path default /v1/traces); empty = tracing off"),
		Protocol: envflag.String(fs, "tracing-protocol", "PORTICO_TRACING_PROTOCOL", DefaultProtocol,
			"OTLP protocol: "+ProtocolGRPC+" or "+ProtocolHTTP),
		SampleRatio: envflag.Float64(fs, "tracing-sample-ratio", "PORTICO_TRACING_SAMPLE_RATIO", DefaultSampleRatio,
			"share of requests without a trace context that start a sampled trace (0 to 1); a request with one follows its caller's sampled flag"),
		ServiceName: envflag.String(fs, "tracing-service-name", "PORTICO_TRACING_SERVICE_NAME", serviceName, "service.name of the spans"),
		CAFile: envflag.String(fs, "tracing-ca-file", "PORTICO_TRACING_CA_FILE", "",
			"CA bundle an https collector's certificate must chain to (PEM; default: the system's roots)"),
	}
}

// Config returns the settings the flags name (a ratio of 0 is SampleNone).
func (fl *Flags) Config() Config {
	c := Config{Endpoint: *fl.Endpoint, Protocol: *fl.Protocol, SampleRatio: *fl.SampleRatio, ServiceName: *fl.ServiceName, CAFile: *fl.CAFile}
	if c.SampleRatio == 0 {
		c.SampleRatio = SampleNone
	}
	return c
}
