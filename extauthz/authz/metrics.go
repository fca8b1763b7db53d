package authz

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	checks         *prometheus.CounterVec
	fetches        *prometheus.CounterVec
	introspections *prometheus.CounterVec
	cache          *prometheus.CounterVec
	latency        prometheus.Histogram
	versions       *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_extauthz_checks_total",
			Help: "Check calls by result (allow, deny) and reason (a bounded code).",
		}, []string{"result", "reason"}),
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_extauthz_jwks_fetches_total",
			Help: "JWKS fetch attempts by result (ok, error).",
		}, []string{"result"}),
		introspections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_extauthz_introspections_total",
			Help: "Token introspection calls (RFC 7662) by result (active, inactive, error), and lookups refused by the provider's call budget (rate_limited).",
		}, []string{"result"}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_extauthz_token_cache_total",
			Help: "Verified-token cache lookups by result (hit, miss).",
		}, []string{"result"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "portico_extauthz_check_duration_seconds",
			Help:    "Time to decide one Check.",
			Buckets: []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 50e-3, 250e-3, 1},
		}),
		versions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portico_extauthz_policy_version",
			Help: "xDS version of the applied policy, per resource type (short name).",
		}, []string{"type"}),
	}
	if reg != nil {
		reg.MustRegister(m.checks, m.fetches, m.introspections, m.cache, m.latency, m.versions)
	}
	return m
}
