package xds

import (
	"strconv"

	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	streams   prometheus.Gauge
	refused   *prometheus.CounterVec
	nodes     prometheus.Gauge
	version   prometheus.Gauge
	acks      *prometheus.CounterVec
	nacks     *prometheus.CounterVec
	responses *prometheus.CounterVec
	// unchanged counts types recorded at a new version without a response
	// (delta streams; nodes.Tracker.AckUnchanged).
	unchanged *prometheus.CounterVec
	// streamFailures counts streams closed before their node answered a
	// response.
	streamFailures prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portico_controlplane_xds_streams", Help: "Open xDS streams (SotW and delta)."}),
		nodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portico_controlplane_xds_nodes", Help: "Distinct connected xDS nodes."}),
		version: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portico_controlplane_xds_latest_version", Help: "Config version of the latest published snapshot."}),
		acks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_controlplane_xds_acks_total", Help: "ACKs received, by resource type."}, []string{"type"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_controlplane_xds_nacks_total", Help: "NACKs received, by resource type."}, []string{"type"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_controlplane_xds_responses_total", Help: "Discovery responses sent, by resource type."}, []string{"type"}),
		unchanged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_controlplane_xds_unchanged_total",
			Help: "Types a delta node was counted at a new version without a response (their resources equal what it holds), by resource type."}, []string{"type"}),
		streamFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portico_controlplane_xds_stream_failures_total",
			Help: "xDS streams that closed before their node answered a response (e.g. one over its receive limit); /admin/v1/nodes lists a node failing repeatedly as failing."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_controlplane_xds_refused_streams_total",
			Help: "Streams refused: identity (no verified identity), cluster (a node cluster reserved for another role), node_id (a node id another identity holds)."}, []string{"reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.streams, m.nodes, m.version, m.acks, m.nacks, m.responses, m.unchanged, m.refused, m.streamFailures)
	}
	return m
}

// versionNumber reads the config version a snapshot was compiled from; the
// snapshot version string is the decimal version.
func versionNumber(snap cache.ResourceSnapshot) float64 {
	if snap == nil {
		return 0
	}
	v, err := strconv.ParseInt(snap.GetVersion(resource.ListenerType), 10, 64)
	if err != nil {
		return 0
	}
	return float64(v)
}
