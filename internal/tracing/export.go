package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// failureLogEvery spaces the log lines of failed exports: a collector
// that is down fails every batch.
const failureLogEvery = time.Minute

// reportingExporter counts exports and logs failures on the service's
// logger. It reports a failure itself and returns nil: the batch
// processor would hand the error to OpenTelemetry's global error handler,
// which prints to stderr outside the service's log format, once per batch.
type reportingExporter struct {
	sdktrace.SpanExporter
	m   *metrics
	log *slog.Logger
	// lastLog is the UnixNano of the last failure logged.
	lastLog atomic.Int64
}

func (e *reportingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err == nil {
		e.m.exported.Add(float64(len(spans)))
		return nil
	}
	e.m.failures.Inc()
	now := time.Now().UnixNano()
	if last := e.lastLog.Load(); (last == 0 || now-last >= int64(failureLogEvery)) && e.lastLog.CompareAndSwap(last, now) {
		e.log.Warn("tracing: export failed, spans dropped (logged at most once a minute)", "spans", len(spans), "err", err)
	}
	return nil
}

type metrics struct {
	exported, failures prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, prefix string) (*metrics, error) {
	if prefix == "" {
		prefix = "portico"
	}
	m := &metrics{
		exported: prometheus.NewCounter(prometheus.CounterOpts{Name: prefix + "_tracing_spans_exported_total",
			Help: "Spans the OTLP collector accepted."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: prefix + "_tracing_export_failures_total",
			Help: "Span batches that could not be exported (their spans are dropped)."}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []*prometheus.Counter{&m.exported, &m.failures} {
		if err := reg.Register(*c); err != nil {
			// A service run again on the same registry keeps counting.
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, fmt.Errorf("tracing: %w", err)
			}
			existing, ok := are.ExistingCollector.(prometheus.Counter)
			if !ok {
				return nil, fmt.Errorf("tracing: %w", err)
			}
			*c = existing
		}
	}
	return m, nil
}
