package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Counter reads the current number of runs per non-terminal state and the
// due backlog (SCHEDULED runs whose slot has passed). Implementations must
// use indexed queries: it runs on every scrape.
type Counter interface {
	CountRuns(ctx context.Context) (byState map[string]int64, dueBacklog int64, err error)
}

// StateCollector exports gauges portico_scheduler_runs{state} and
// portico_scheduler_due_backlog from a Counter at scrape time.
type StateCollector struct {
	src     Counter
	log     *slog.Logger
	runs    *prometheus.Desc
	backlog *prometheus.Desc
}

var _ prometheus.Collector = (*StateCollector)(nil)

// NewStateCollector returns a collector over src; register it once.
func NewStateCollector(src Counter, log *slog.Logger) *StateCollector {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &StateCollector{src: src, log: log,
		runs: prometheus.NewDesc("portico_scheduler_runs", "Runs currently in each non-terminal state (and DEAD, the DLQ size).",
			[]string{"state"}, nil),
		backlog: prometheus.NewDesc("portico_scheduler_due_backlog", "SCHEDULED runs whose slot has passed but no runner has fired yet.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *StateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.runs
	ch <- c.backlog
}

// Collect implements prometheus.Collector; a failed query exports nothing
// (the scrape still succeeds).
func (c *StateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	by, due, err := c.src.CountRuns(ctx)
	if err != nil {
		c.log.Warn("metrics: counting runs failed", "err", err)
		return
	}
	for state, n := range by {
		ch <- prometheus.MustNewConstMetric(c.runs, prometheus.GaugeValue, float64(n), state)
	}
	ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(due))
}
