package nodes

import (
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestStaleNodesMetric follows nodes into and out of each stale reason:
// a NACK until the next ACK, a response unanswered past the threshold,
// and stream failures until the node ACKs the failed type.
func TestStaleNodesMetric(t *testing.T) {
	tr := NewTracker()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	tr.timeNow = func() time.Time { return now }
	c := tr.Collector(30 * time.Second)
	want := func(failing, nack, unanswered int) {
		t.Helper()
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(c)
		mfs, err := reg.Gather()
		if err != nil || len(mfs) != 1 || mfs[0].GetName() != "portico_controlplane_xds_stale_nodes" {
			t.Fatalf("gathered %v, %v", mfs, err)
		}
		got := map[string]float64{}
		for _, m := range mfs[0].GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
		exp := map[string]float64{StaleFailing: float64(failing), StaleNack: float64(nack), StaleUnanswered: float64(unanswered)}
		if !maps.Equal(got, exp) {
			t.Fatalf("stale nodes = %v, want %v", got, exp)
		}
	}
	const cds, lds = "type.googleapis.com/envoy.config.cluster.v3.Cluster", "type.googleapis.com/envoy.config.listener.v3.Listener"
	tr.Connect("a", "portico-gateway", "", "", false)
	tr.Connect("b", "portico-gateway", "", "", false)
	tr.Sent("a", cds, "1")
	tr.Ack("a", cds, "1")
	tr.Sent("b", cds, "1")
	want(0, 0, 0)

	now = now.Add(time.Second)
	tr.Sent("a", cds, "2")
	tr.Nack("a", cds, "2", "bad cluster")
	want(0, 1, 0)

	now = now.Add(31 * time.Second) // b never answered version 1
	want(0, 1, 1)
	tr.Ack("b", cds, "1")
	want(0, 1, 0)

	now = now.Add(time.Second)
	tr.Sent("a", cds, "3")
	tr.Ack("a", cds, "3") // a later version ACKed: the NACK is history
	want(0, 0, 0)

	for range FailingAfter {
		tr.Sent("b", lds, "3")
		tr.StreamFailed("b", []string{lds}, "response over the receive limit")
	}
	want(1, 0, 0)
	tr.Sent("b", lds, "3")
	tr.Ack("b", lds, "3")
	want(0, 0, 0)
}
