package cp

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// Request ops (label op of portico_kvnode_cp_request_duration_seconds).
const (
	opGet    = "get" // linearizable or stale
	opPut    = "put" // unconditional
	opCAS    = "cas" // PUT with If-Match
	opDelete = "delete"
	opTxn    = "txn"
)

// requestMetrics is the latency of the requests this node served itself,
// by op and result. A follower's not_leader answers are forwarded by the
// HTTP layer; the leader records the forwarded request too.
type requestMetrics struct {
	duration *prometheus.HistogramVec
}

func newRequestMetrics() *requestMetrics {
	return &requestMetrics{duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "portico_kvnode_cp_request_duration_seconds",
		Help:    "Consensus-tier request latency on this node by op (get, put, cas, delete, txn) and result (ok, not_found, conflict, not_leader, unknown_outcome, lease_not_found, canceled, error).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 17),
	}, []string{"op", "result"})}
}

// observe records one request; call it deferred with a pointer to the
// named error result.
func (m *requestMetrics) observe(op string, start time.Time, err *error) {
	m.duration.WithLabelValues(op, result(*err)).Observe(time.Since(start).Seconds())
}

func result(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	case errors.Is(err, ErrConflict):
		return "conflict"
	case errors.Is(err, ErrUnknownOutcome):
		return "unknown_outcome"
	case errors.Is(err, ErrNotLeader), errors.Is(err, ErrClosed):
		return "not_leader"
	case errors.Is(err, ErrLeaseNotFound):
		return "lease_not_found"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	return "error"
}

// collector exposes the group's Raft state at scrape time: whether this
// node leads, the term, the log indexes (commit − applied is apply lag),
// the voter count and the highest revision.
type collector struct {
	g                                          *Group
	leader, term, commit, applied, last, peers *prometheus.Desc
	revision                                   *prometheus.Desc
}

// Collector returns the group's metrics (portico_kvnode_cp_*), for the
// node's registry, and the request latency histogram.
func (g *Group) Collector() prometheus.Collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("portico_kvnode_cp_"+name, help, nil, nil)
	}
	return &collector{g: g,
		leader:   d("leader", "1 when this node is the Raft leader of the consensus tier, else 0."),
		term:     d("term", "Current Raft term; a rising term means elections."),
		commit:   d("commit_index", "Highest Raft log index known committed."),
		applied:  d("applied_index", "Highest Raft log index applied to the key-value state (commit_index − applied_index is apply lag)."),
		last:     d("last_log_index", "Highest Raft log index stored on this node."),
		peers:    d("voters", "Voters in the Raft configuration as this node sees it."),
		revision: d("revision", "Highest key revision in the state (revisions are log indexes)."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.leader, c.term, c.commit, c.applied, c.last, c.peers, c.revision} {
		ch <- d
	}
	c.g.metrics.duration.Describe(ch)
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.g.raft.Stats()
	num := func(k string) float64 {
		v, _ := strconv.ParseFloat(st[k], 64)
		return v
	}
	leader := 0.0
	if c.g.raft.State() == raft.Leader {
		leader = 1
	}
	voters := 0.0
	if f := c.g.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if s.Suffrage == raft.Voter {
				voters++
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(c.leader, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(c.term, prometheus.GaugeValue, num("term"))
	ch <- prometheus.MustNewConstMetric(c.commit, prometheus.GaugeValue, num("commit_index"))
	ch <- prometheus.MustNewConstMetric(c.applied, prometheus.GaugeValue, num("applied_index"))
	ch <- prometheus.MustNewConstMetric(c.last, prometheus.GaugeValue, num("last_log_index"))
	ch <- prometheus.MustNewConstMetric(c.peers, prometheus.GaugeValue, voters)
	ch <- prometheus.MustNewConstMetric(c.revision, prometheus.GaugeValue, float64(c.g.Revision()))
	c.g.metrics.duration.Collect(ch)
}
