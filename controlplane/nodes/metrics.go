package nodes

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultStaleAfter is how long a response may go unanswered before its
// node counts as stale (reason "unanswered"): well above an Envoy's time
// to apply a large update, far below what an operator would tolerate.
const DefaultStaleAfter = time.Minute

// Stale reasons (label reason of portico_controlplane_xds_stale_nodes). A
// stale node keeps serving its last good config; these say why it is not
// on the version this replica serves it.
const (
	StaleFailing    = "failing"    // its streams keep failing (State failing)
	StaleNack       = "nack"       // its last answer for some type is a NACK
	StaleUnanswered = "unanswered" // a response sent over StaleAfter ago is unanswered
)

const staleHelp = "xDS nodes of this replica not running the version it serves them, by reason (failing: streams keep failing; nack: the last answer for some type is a NACK; unanswered: a response went unanswered past the stale threshold). Each node counts once, under the first reason in that order."

var staleDesc = prometheus.NewDesc("portico_controlplane_xds_stale_nodes", staleHelp, []string{"reason"}, nil)

// Collector returns a collector exporting portico_controlplane_xds_stale_nodes
// at scrape time; staleAfter <= 0 means DefaultStaleAfter. Register it once
// per tracker.
func (t *Tracker) Collector(staleAfter time.Duration) prometheus.Collector {
	if staleAfter <= 0 {
		staleAfter = DefaultStaleAfter
	}
	return staleCollector{t: t, after: staleAfter}
}

type staleCollector struct {
	t     *Tracker
	after time.Duration
}

func (c staleCollector) Describe(ch chan<- *prometheus.Desc) { ch <- staleDesc }

func (c staleCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[string]int{StaleFailing: 0, StaleNack: 0, StaleUnanswered: 0}
	now := c.t.now()
	for _, s := range c.t.List() {
		if r := staleReason(s, now, c.after); r != "" {
			counts[r]++
		}
	}
	for r, n := range counts {
		ch <- prometheus.MustNewConstMetric(staleDesc, prometheus.GaugeValue, float64(n), r)
	}
}

// staleReason says why s is stale at now, or "" when it is not.
func staleReason(s Status, now time.Time, after time.Duration) string {
	if s.State == StateFailing {
		return StaleFailing
	}
	unanswered := false
	for _, ts := range s.Types {
		if ts.Nack != nil && ts.Nack.Version != ts.AckedVersion && (ts.AckedAt.IsZero() || ts.Nack.At.After(ts.AckedAt)) {
			return StaleNack
		}
		if ts.SentVersion != "" && now.Sub(ts.sentAt) > after {
			unanswered = true
		}
	}
	if unanswered {
		return StaleUnanswered
	}
	return ""
}

func (t *Tracker) now() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.timeNow()
}
