package cp_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// gauges gathers one group's collector into name → value.
func gauges(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			out[mf.GetName()] = gaugeValue(m)
		}
	}
	return out
}

func gaugeValue(m *dto.Metric) float64 { return m.GetGauge().GetValue() }

// The metrics say who leads, how many voters there are, and that a write
// moves the indexes and the revision on every node.
func TestMetrics(t *testing.T) {
	gr := newGroup(t, 3)
	l := gr.waitLeader()
	leaders := 0
	for i := range 3 {
		m := gauges(t, gr.groupOf(i).Collector())
		leaders += int(m["portico_kvnode_cp_leader"])
		if m["portico_kvnode_cp_voters"] != 3 || m["portico_kvnode_cp_term"] < 1 {
			t.Fatalf("node %d: %v", i, m)
		}
	}
	if leaders != 1 {
		t.Fatalf("%d nodes report leading, want 1", leaders)
	}
	e, err := gr.groupOf(l).Put(t.Context(), "m", "k", []byte("v"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		poll(t, "revision on every node", 10*time.Second, func() bool {
			m := gauges(t, gr.groupOf(i).Collector())
			return m["portico_kvnode_cp_revision"] == float64(e.Revision) && m["portico_kvnode_cp_applied_index"] >= float64(e.Revision)
		})
	}
}
