package service

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics have bounded labels only: result, mode and fail mode. The
// request path uses counters resolved up front (decision), not label
// lookups, which take a lock inside the vector.
type metrics struct {
	decisions      *prometheus.CounterVec
	decision       map[[2]string]prometheus.Counter // {result, mode}
	backendErrors  prometheus.Counter
	degraded       *prometheus.CounterVec
	degradedOpen   prometheus.Counter
	degradedClosed prometheus.Counter
	// breakerRejected counts calls an open breaker failed without trying.
	breakerRejected prometheus.Counter
	// leaseLocal counts requests decided from token leases alone.
	leaseLocal prometheus.Counter
	latency    prometheus.Histogram
	replicas   prometheus.Gauge
}

// newMetrics registers the metrics; degraded, when set, reports how many
// backend shards are degraded (breaker not closed), and refunds how many
// commits of requests denied across Redis Cluster slots were given back.
func newMetrics(reg prometheus.Registerer, degraded func() float64, refunds func() (given, failed uint64)) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_ratelimitsvc_decisions_total",
			Help: "Descriptor decisions by result (ok, over_limit; fail_open and local_over_limit: decided by the local fallback bucket; fail_closed) and rule mode (enforce, shadow); shadow over_limit are would-be denials that were allowed.",
		}, []string{"result", "mode"}),
		backendErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portico_ratelimitsvc_backend_errors_total",
			Help: "Bucket store calls that failed or timed out.",
		}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_ratelimitsvc_degraded_total",
			Help: "Requests decided by fail mode because the bucket store failed, by fail mode (open: local fallback bucket, closed: denied).",
		}, []string{"fail_mode"}),
		breakerRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portico_ratelimitsvc_breaker_rejected_total",
			Help: "Bucket store calls failed at once by an open circuit breaker, without contacting the store.",
		}),
		leaseLocal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portico_ratelimitsvc_lease_local_total",
			Help: "Requests on highVolume rules decided from this replica's token leases (or its pre-filter) without a store call.",
		}),
		replicas: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portico_ratelimitsvc_replicas",
			Help: "Replicas this one believes share the limits; degraded-mode local buckets get limit/replicas.",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "portico_ratelimitsvc_request_duration_seconds",
			Help:    "ShouldRateLimit latency inside the service.",
			Buckets: []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3},
		}),
	}
	if degraded == nil {
		degraded = func() float64 { return 0 }
	}
	gauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "portico_ratelimitsvc_degraded",
		Help: "Bucket store shards whose circuit breaker is open or half-open; while above 0, requests to them are decided by fail mode.",
	}, degraded)
	if refunds == nil {
		refunds = func() (uint64, uint64) { return 0, 0 }
	}
	refundOpts := func(result string) prometheus.CounterOpts {
		return prometheus.CounterOpts{
			Name:        "portico_ratelimitsvc_refunds_total",
			Help:        "Redis Cluster slots whose commit was given back because another slot of the request denied it (or failed), by result (given, failed: those tokens stay consumed).",
			ConstLabels: prometheus.Labels{"result": result},
		}
	}
	given := prometheus.NewCounterFunc(refundOpts("given"), func() float64 { g, _ := refunds(); return float64(g) })
	failed := prometheus.NewCounterFunc(refundOpts("failed"), func() float64 { _, f := refunds(); return float64(f) })
	for _, c := range []prometheus.Collector{m.decisions, m.backendErrors, m.degraded, m.breakerRejected, m.leaseLocal, gauge, m.latency, m.replicas, given, failed} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("service: metrics: %w", err)
		}
	}
	m.decision = map[[2]string]prometheus.Counter{}
	for _, result := range []string{"ok", "over_limit", "fail_open", "local_over_limit", "fail_closed"} {
		for _, mode := range []string{"enforce", "shadow"} {
			m.decision[[2]string{result, mode}] = m.decisions.WithLabelValues(result, mode)
		}
	}
	m.degradedOpen, m.degradedClosed = m.degraded.WithLabelValues("open"), m.degraded.WithLabelValues("closed")
	return m, nil
}
