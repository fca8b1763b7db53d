package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-io/portico/cachenode/namespace"
)

func TestCollectorReadsNamespaceCounters(t *testing.T) {
	reg := namespace.NewRegistry(namespace.RegistryConfig{Shards: 2})
	if err := reg.Apply([]namespace.Settings{{Name: "a", MaxMemory: 1000}}); err != nil {
		t.Fatal(err)
	}
	a, _ := reg.Get("a")
	a.Counters.Hits.Add(3)
	a.Counters.Misses.Add(2)
	pr := prometheus.NewPedanticRegistry()
	m, err := New(pr, reg, 5000, func() int { return 4 })
	if err != nil {
		t.Fatal(err)
	}
	m.Observe(a, "get", time.Millisecond, false)
	m.Observe(a, "get", -1, true) // latency not sampled
	mfs, err := pr.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			switch {
			case m.Counter != nil:
				got[name] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				got[name] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				got[name] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	for name, want := range map[string]float64{
		"portico_cachenode_hits_total/a":               3,
		"portico_cachenode_misses_total/a":             2,
		"portico_cachenode_hits_total/default":         0,
		"portico_cachenode_memory_quota_bytes/a":       1000,
		"portico_cachenode_node_maxmemory_bytes":       5000,
		"portico_cachenode_connected_clients":          4,
		"portico_cachenode_command_errors_total/a":     1,
		"portico_cachenode_command_duration_seconds/a": 1,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}
