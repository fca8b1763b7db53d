package client

import "github.com/prometheus/client_golang/prometheus"

// metrics are plain counters (no label lookups) so the hit path pays one
// atomic add.
type metrics struct {
	hits, misses, stale, fallbacks, loads, loadErrors, overloaded prometheus.Counter
	localHits, replicaReads, fillsRefused, cacheErrors            prometheus.Counter
	breakerState                                                  prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "portico", Subsystem: "cacheclient", Name: name, Help: help})
	}
	m := &metrics{
		hits:         c("hits_total", "Gets answered by the cache with a fresh value (or a cached not-found)."),
		misses:       c("misses_total", "Gets that found no value and went to the loader."),
		stale:        c("stale_served_total", "Gets answered with a value past its soft TTL while one refresh runs."),
		fallbacks:    c("fallbacks_total", "Gets that went to the loader because the cache was unavailable (breaker open or error)."),
		loads:        c("loader_calls_total", "Loader calls (after single-flight)."),
		loadErrors:   c("loader_errors_total", "Loader calls that failed (not counting not-found)."),
		overloaded:   c("overloaded_total", "Gets refused because the loader bulkhead was full."),
		localHits:    c("local_hits_total", "Gets answered from the in-process hot-key cache."),
		replicaReads: c("replica_reads_total", "Reads retried against a replica after the primary timed out."),
		fillsRefused: c("fills_refused_total", "Fills and tombstones refused because the cache held a newer version."),
		cacheErrors:  c("cache_errors_total", "Cache commands that failed (timeouts, connection errors)."),
		breakerState: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "portico", Subsystem: "cacheclient", Name: "breaker_state",
			Help: "Cache circuit breaker: 0 closed, 1 open, 2 half-open."}),
	}
	if reg != nil {
		for _, col := range []prometheus.Collector{m.hits, m.misses, m.stale, m.fallbacks, m.loads, m.loadErrors, m.overloaded,
			m.localHits, m.replicaReads, m.fillsRefused, m.cacheErrors, m.breakerState} {
			if err := reg.Register(col); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
