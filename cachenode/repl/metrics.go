package repl

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are replication's Prometheus metrics, shared by a node's Feed,
// Primary and Follower.
type Metrics struct {
	connected prometheus.Gauge
	lag       *prometheus.GaugeVec
	fullSyncs *prometheus.CounterVec
	partial   *prometheus.CounterVec
	linkUp    prometheus.Gauge
	applied   prometheus.Counter
}

// NewMetrics creates the metrics and registers them, with the feed's
// offset and backlog size read at scrape time, on r (nil registers
// nothing: metrics then only count).
func NewMetrics(r prometheus.Registerer, feed *Feed) (*Metrics, error) {
	m := &Metrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "portico_cachenode_repl_connected_replicas",
			Help: "Replicas streaming from this node."}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "portico_cachenode_repl_replica_lag_bytes",
			Help: "Bytes of the replication stream a replica has not acknowledged yet."}, []string{"replica"}),
		fullSyncs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portico_cachenode_repl_full_syncs_total",
			Help: "Full resynchronizations, served (side=primary) or done (side=replica)."}, []string{"side"}),
		partial: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portico_cachenode_repl_partial_syncs_total",
			Help: "Partial resynchronizations (continued from the backlog), served or done."}, []string{"side"}),
		linkUp: prometheus.NewGauge(prometheus.GaugeOpts{Name: "portico_cachenode_repl_link_up",
			Help: "1 while this replica's link to its primary is up."}),
		applied: prometheus.NewCounter(prometheus.CounterOpts{Name: "portico_cachenode_repl_applied_records_total",
			Help: "Records a replica applied from its primary (snapshot and stream)."}),
	}
	if r == nil {
		return m, nil
	}
	cs := []prometheus.Collector{m.connected, m.lag, m.fullSyncs, m.partial, m.linkUp, m.applied,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "portico_cachenode_repl_offset_bytes",
			Help: "Replication offset: bytes of changes this node has logged."}, func() float64 { return float64(feed.Offset()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "portico_cachenode_repl_backlog_bytes",
			Help: "Bytes of the replication backlog in use."}, func() float64 { s, e := feed.Backlog(); return float64(e - s) }),
	}
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// nopMetrics is used when a config has no Metrics.
func nopMetrics() *Metrics {
	m, _ := NewMetrics(nil, nil)
	return m
}
