package cp_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/portico-io/portico/internal/eventually"
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
		eventually.True(t, 10*time.Second, "revision on every node", func() bool {
			m := gauges(t, gr.groupOf(i).Collector())
			return m["portico_kvnode_cp_revision"] == float64(e.Revision) && m["portico_kvnode_cp_applied_index"] >= float64(e.Revision)
		})
	}
}

// histCount is the sample count of one op/result series of the request
// histogram (0 when absent).
func histCount(t *testing.T, c prometheus.Collector, op, result string) uint64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "portico_kvnode_cp_request_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["op"] == op && labels["result"] == result {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

// Every request the node serves lands in the latency histogram under its
// op and result.
func TestRequestMetrics(t *testing.T) {
	gr := newGroup(t, 3)
	l := gr.waitLeader()
	g := gr.groupOf(l)
	ctx := t.Context()
	e, err := g.Put(ctx, "m", "k", []byte("v"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Get(ctx, "m", "k", false); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Get(ctx, "m", "absent", false); err == nil {
		t.Fatal("absent key found")
	}
	stale := e.Revision + 100
	if _, err := g.Put(ctx, "m", "k", []byte("w"), &stale, 0); err == nil {
		t.Fatal("CAS on a wrong revision applied")
	}
	if _, err := g.Put(ctx, "m", "k", []byte("w"), &e.Revision, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Delete(ctx, "m", "k", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := gr.groupOf(gr.follower(l)).Put(ctx, "m", "k", []byte("v"), nil, 0); err == nil {
		t.Fatal("a follower accepted a write")
	}
	for _, c := range []struct {
		g          int
		op, result string
	}{
		{l, "put", "ok"}, {l, "get", "ok"}, {l, "get", "not_found"}, {l, "cas", "conflict"},
		{l, "cas", "ok"}, {l, "delete", "ok"}, {gr.follower(l), "put", "not_leader"},
	} {
		if n := histCount(t, gr.groupOf(c.g).Collector(), c.op, c.result); n != 1 {
			t.Errorf("op=%s result=%s: %d samples, want 1", c.op, c.result, n)
		}
	}
}
