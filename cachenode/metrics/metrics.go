// Package metrics exports a cache node's Prometheus metrics,
// portico_cachenode_*. Counters live in the namespaces as atomics and are
// read at scrape time, so the command path pays no Prometheus cost except
// one histogram observation. Labels are bounded: namespace (from the config
// file), key prefix (at most MaxPrefixes per namespace) and hot-key rank.
package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/namespace"
	"github.com/portico-io/portico/cachenode/topology"
)

// Metrics is the node's collector plus its latency histogram.
type Metrics struct {
	reg     *namespace.Registry
	clients func() int
	maxmem  int64
	latency *prometheus.HistogramVec
	errors  *prometheus.CounterVec
	cache   sync.Map // *namespace.Namespace -> observers
}

type observers struct {
	lat prometheus.Observer
	err prometheus.Counter
}

// New registers the node's metrics with r.
func New(r prometheus.Registerer, reg *namespace.Registry, maxmemory int64, clients func() int) (*Metrics, error) {
	m := &Metrics{reg: reg, clients: clients, maxmem: maxmemory,
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "portico_cachenode_command_duration_seconds",
			Help:    "Time to execute a command inside the node (parsing and network excluded), by namespace; one command in 8 is sampled.",
			Buckets: namespace.LatencyBuckets,
		}, []string{"namespace"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_cachenode_command_errors_total",
			Help: "Commands answered with an error reply, by namespace.",
		}, []string{"namespace"}),
	}
	for _, c := range []prometheus.Collector{m, m.latency, m.errors} {
		if err := r.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Observe records one command; it is command.Config.Observe.
func (m *Metrics) Observe(ns *namespace.Namespace, _ string, d time.Duration, isErr bool) {
	v, ok := m.cache.Load(ns)
	if !ok {
		v, _ = m.cache.LoadOrStore(ns, &observers{m.latency.WithLabelValues(ns.Name), m.errors.WithLabelValues(ns.Name)})
	}
	o := v.(*observers)
	if d >= 0 {
		o.lat.Observe(d.Seconds())
	}
	if isErr {
		o.err.Inc()
	}
}

var (
	nsLabels    = []string{"namespace"}
	descKeys    = prometheus.NewDesc("portico_cachenode_keys", "Keys in the namespace.", nsLabels, nil)
	descMem     = prometheus.NewDesc("portico_cachenode_memory_bytes", "Bytes accounted to the namespace.", nsLabels, nil)
	descQuota   = prometheus.NewDesc("portico_cachenode_memory_quota_bytes", "The namespace's memory quota (0 = none).", nsLabels, nil)
	descOps     = prometheus.NewDesc("portico_cachenode_ops_total", "Commands executed.", nsLabels, nil)
	descHits    = prometheus.NewDesc("portico_cachenode_hits_total", "Key lookups that found the key.", nsLabels, nil)
	descMisses  = prometheus.NewDesc("portico_cachenode_misses_total", "Key lookups that did not find the key.", nsLabels, nil)
	descEvict   = prometheus.NewDesc("portico_cachenode_evictions_total", "Keys evicted.", nsLabels, nil)
	descExpire  = prometheus.NewDesc("portico_cachenode_expirations_total", "Keys removed at their TTL (lazily or actively).", nsLabels, nil)
	descLimited = prometheus.NewDesc("portico_cachenode_rate_limited_total", "Commands refused by the namespace's ops or bandwidth limit.", nsLabels, nil)
	descOOM     = prometheus.NewDesc("portico_cachenode_oom_rejections_total", "Writes refused with OOM.", nsLabels, nil)
	descIn      = prometheus.NewDesc("portico_cachenode_bytes_in_total", "Request argument bytes.", nsLabels, nil)
	descOut     = prometheus.NewDesc("portico_cachenode_bytes_out_total", "Reply bytes.", nsLabels, nil)
	pLabels     = []string{"namespace", "prefix"}
	descPOps    = prometheus.NewDesc("portico_cachenode_prefix_ops_total", "Commands by first key's prefix.", pLabels, nil)
	descPHits   = prometheus.NewDesc("portico_cachenode_prefix_hits_total", "Hits by key prefix.", pLabels, nil)
	descPMisses = prometheus.NewDesc("portico_cachenode_prefix_misses_total", "Misses by key prefix.", pLabels, nil)
	descPEvict  = prometheus.NewDesc("portico_cachenode_prefix_evictions_total", "Keys evicted, by key prefix.", pLabels, nil)
	descPExpire = prometheus.NewDesc("portico_cachenode_prefix_expirations_total", "Keys removed at their TTL, by key prefix.", pLabels, nil)
	descPMem    = prometheus.NewDesc("portico_cachenode_prefix_memory_bytes", "Bytes accounted to the prefix's keys.", pLabels, nil)
	descPLat    = prometheus.NewDesc("portico_cachenode_prefix_command_duration_seconds", "Time to execute a command inside the node, by the first key's prefix; one command in 8 is sampled.", pLabels, nil)
	descHot     = prometheus.NewDesc("portico_cachenode_hotkey_estimated_accesses", "Estimated accesses of the namespace's rank-th hottest key (key names: CACHE HOTKEYS).", []string{"namespace", "rank"}, nil)
	descNodeMem = prometheus.NewDesc("portico_cachenode_node_memory_bytes", "Bytes accounted across namespaces.", nil, nil)
	descNodeMax = prometheus.NewDesc("portico_cachenode_node_maxmemory_bytes", "The node's maxmemory (0 = none).", nil, nil)
	descClients = prometheus.NewDesc("portico_cachenode_connected_clients", "Connected RESP clients.", nil, nil)
)

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descKeys, descMem, descQuota, descOps, descHits, descMisses, descEvict, descExpire,
		descLimited, descOOM, descIn, descOut, descPOps, descPHits, descPMisses, descPEvict, descPExpire, descPMem, descPLat, descHot, descNodeMem, descNodeMax, descClients} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	g := func(d *prometheus.Desc, v int64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), l...)
	}
	c := func(d *prometheus.Desc, v int64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	for _, ns := range m.reg.All() {
		n := ns.Name
		g(descKeys, ns.DB.Len(), n)
		g(descMem, ns.DB.Used(), n)
		g(descQuota, ns.Settings().MaxMemory, n)
		c(descOps, ns.Counters.Ops.Load(), n)
		c(descHits, ns.Counters.Hits.Load(), n)
		c(descMisses, ns.Counters.Misses.Load(), n)
		c(descEvict, ns.DB.Evicted(), n)
		c(descExpire, ns.DB.Expired(), n)
		c(descLimited, ns.Counters.RateLimited.Load(), n)
		c(descOOM, ns.Counters.OOM.Load(), n)
		c(descIn, ns.Counters.BytesIn.Load(), n)
		c(descOut, ns.Counters.BytesOut.Load(), n)
		for p, pc := range ns.Prefixes() {
			c(descPOps, pc.Ops.Load(), n, p)
			c(descPHits, pc.Hits.Load(), n, p)
			c(descPMisses, pc.Misses.Load(), n, p)
			c(descPEvict, pc.Evictions.Load(), n, p)
			c(descPExpire, pc.Expirations.Load(), n, p)
			g(descPMem, pc.Memory.Load(), n, p)
			count, sum, buckets := pc.Latency.Snapshot()
			ch <- prometheus.MustNewConstHistogram(descPLat, count, sum, buckets, n, p)
		}
		for i, k := range ns.Hot.Top() {
			g(descHot, int64(k.Count)*int64(ns.Hot.SampleEvery()), n, strconv.Itoa(i+1))
		}
	}
	g(descNodeMem, m.reg.NodeUsage().Load())
	g(descNodeMax, m.maxmem)
	g(descClients, int64(m.clients()))
}

// RegisterCluster registers the cluster-mode gauges: the slot map's epoch
// and, when topo is set (the map comes from a topology store), the stored
// revision installed, whether the map is stale (the store unreachable past
// the Syncer's StaleAfter) and the seconds since the store last answered.
func RegisterCluster(r prometheus.Registerer, st *cluster.State, topo func() topology.Status) error {
	cs := []prometheus.Collector{prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "portico_cachenode_cluster_epoch",
		Help: "Epoch of the slot map the node serves.",
	}, func() float64 { return float64(st.Load().Epoch) })}
	if topo != nil {
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "portico_cachenode_cluster_topology_revision",
				Help: "Topology store revision of the last stored map seen.",
			}, func() float64 { return float64(topo().Revision) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "portico_cachenode_cluster_topology_stale",
				Help: "1 when the topology store has not answered for too long: the node serves its last slot map, which may be outdated.",
			}, func() float64 {
				if topo().Stale {
					return 1
				}
				return 0
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "portico_cachenode_cluster_topology_last_contact_age_seconds",
				Help: "Seconds since the topology store last answered a read or sent a watch event.",
			}, func() float64 {
				if lc := topo().LastContact; !lc.IsZero() {
					return time.Since(lc).Seconds()
				}
				return -1
			}))
	}
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}
