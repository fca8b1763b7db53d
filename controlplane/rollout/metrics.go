package rollout

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	wave      prometheus.Gauge
	results   *prometheus.CounterVec
	nackRatio prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		wave: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portico_controlplane_rollout_wave",
			Help: "1-based number of the running rollout's current wave as this replica applies it; 0 when no rollout runs.",
		}),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_controlplane_rollouts_total",
			Help: "Rollouts ended by this replica, by result (succeeded, rolled_back, aborted).",
		}, []string{"result"}),
		nackRatio: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portico_controlplane_rollout_nack_ratio",
			Help: "NACK ratio of the running rollout at the leader's last evaluation (nodes that NACKed the target / nodes in the rollout).",
		}),
	}
	for _, s := range []State{StateSucceeded, StateRolledBack, StateAborted} {
		m.results.WithLabelValues(string(s))
	}
	if reg != nil {
		reg.MustRegister(m.wave, m.results, m.nackRatio)
	}
	return m
}
