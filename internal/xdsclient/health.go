package xdsclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Defaults for Health.
const (
	// DefaultStaleAfter is how long the client may be out of sync before
	// readiness fails: long enough that a control-plane restart or a short
	// outage (during which the last good state keeps serving, see
	// ARCHITECTURE's static stability) does not take replicas out of
	// service, short enough that an operator sees a lasting problem.
	DefaultStaleAfter = 2 * time.Minute
	// DefaultSyncGrace is how long a new stream must stay up, without a
	// response, to count as in sync: the server answers a subscription at
	// once when the versions the client reports are not current, and says
	// nothing when they are.
	DefaultSyncGrace = 3 * time.Second
)

// Health is what the client knows about its own freshness: whether it holds
// what the control plane serves, and if not since when and why. Run feeds it
// (Config.Health); readiness checks and metrics read it. It is safe for
// concurrent use.
//
// The client is stale from the first failure until it is back in sync
// (a response applied, or a stream up for SyncGrace with none pending).
// Failures are a stream that cannot be opened or ends, and a NACK (kept
// until that type applies again). Check fails once the client has been
// stale for StaleAfter, or at once when the failure is a response that
// cannot be received at all (larger than the receive limit, or not
// decodable): retrying cannot fix those, and the last good state silently
// ages otherwise. Such a failure is kept until every subscribed type has
// applied since, or a stream stays up for SyncGrace. Either way the applier keeps serving the last good state.
type Health struct {
	// StaleAfter and SyncGrace: see the defaults. Set them before Run.
	StaleAfter, SyncGrace time.Duration

	mu          sync.Mutex
	timeNow     func() time.Time
	streamErr   error           // nil while the current stream is in sync
	unreachable bool            // streamErr is a response that cannot be received
	types       []string        // the subscribed types (Run sets them)
	pending     map[string]bool // types not applied since the unreceivable response
	nacks       map[string]string
	since       time.Time // start of the stale period; zero when in sync
	syncedAt    time.Time // last moment known in sync
	failures    map[codes.Code]int
	respBytes   int
}

// NewHealth returns a Health that is stale (not yet in sync) from now on.
func NewHealth() *Health {
	h := &Health{timeNow: time.Now, nacks: map[string]string{}, failures: map[codes.Code]int{}}
	h.streamErr = errNotSynced
	h.since = h.timeNow()
	return h
}

var errNotSynced = errors.New("not yet in sync with the control plane")

// ErrStale is the error class Check returns.
var ErrStale = errors.New("policy stale")

func (h *Health) staleAfter() time.Duration {
	if h.StaleAfter <= 0 {
		return DefaultStaleAfter
	}
	return h.StaleAfter
}

func (h *Health) syncGrace() time.Duration {
	if h.SyncGrace <= 0 {
		return DefaultSyncGrace
	}
	return h.SyncGrace
}

// updateLocked recomputes since after a change.
func (h *Health) updateLocked() {
	now := h.timeNow()
	if h.streamErr == nil && len(h.nacks) == 0 {
		h.since = time.Time{}
		h.syncedAt = now
		return
	}
	if h.since.IsZero() {
		h.since = now
	}
}

// streamFailed records a stream that could not be opened or ended.
func (h *Health) streamFailed(err error) {
	if h == nil || err == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.streamErr, h.unreachable = err, unreceivable(err)
	if h.unreachable {
		h.pending = make(map[string]bool, len(h.types))
		for _, t := range h.types {
			h.pending[t] = true
		}
	}
	h.failures[status.Code(err)]++
	h.updateLocked()
}

// subscribe records the types the client subscribes to.
func (h *Health) subscribe(types []string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.types = slices.Clone(types)
}

// inSync records the current stream as in sync.
func (h *Health) inSync() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.streamErr, h.unreachable = nil, false
	h.updateLocked()
}

// received records the size of a response as it arrives.
func (h *Health) received(n int) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.respBytes = n
}

// applied records that a response of typeURL was applied (ACK).
func (h *Health) applied(typeURL string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.nacks, typeURL)
	// The response that could not be received names no type, and on each
	// reconnect the small types apply first: clearing an unreceivable
	// failure on any of them made readiness flap between reconnects. It is
	// cleared once every subscribed type has applied since (or by inSync).
	delete(h.pending, typeURL)
	if !h.unreachable || (len(h.types) > 0 && len(h.pending) == 0) {
		h.streamErr, h.unreachable = nil, false
	}
	h.updateLocked()
}

// rejected records a NACK of version of typeURL.
func (h *Health) rejected(typeURL, version string, err error) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nacks[typeURL] = fmt.Sprintf("rejected %s version %s: %v", shortType(typeURL), version, err)
	h.updateLocked()
}

// unreceivable reports whether err means a response arrived that the
// client cannot take in: larger than the receive limit, or undecodable.
func unreceivable(err error) bool {
	s, ok := status.FromError(err)
	if !ok {
		return false
	}
	return s.Code() == codes.ResourceExhausted ||
		(s.Code() == codes.Internal && strings.Contains(s.Message(), "unmarshal"))
}

// Stale reports since when the client has been out of sync and why (zero
// time and nil when in sync).
func (h *Health) Stale() (since time.Time, reason error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.since, h.reasonLocked()
}

func (h *Health) reasonLocked() error {
	if h.since.IsZero() {
		return nil
	}
	var parts []string
	if h.streamErr != nil {
		parts = append(parts, h.streamErr.Error())
	}
	types := make([]string, 0, len(h.nacks))
	for t := range h.nacks {
		types = append(types, t)
	}
	sort.Strings(types)
	for _, t := range types {
		parts = append(parts, h.nacks[t])
	}
	return errors.New(strings.Join(parts, "; "))
}

// Check is a readiness check (health.Check): nil while in sync or stale
// for less than StaleAfter; otherwise "policy stale since <time>: <why>".
func (h *Health) Check(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.checkLocked()
}

func (h *Health) checkLocked() error {
	if h.since.IsZero() {
		return nil
	}
	if !h.unreachable && h.timeNow().Sub(h.since) < h.staleAfter() {
		return nil
	}
	return fmt.Errorf("%w since %s: %v", ErrStale, h.since.UTC().Format(time.RFC3339), h.reasonLocked())
}

// Register adds the client's metrics to reg, named prefix + "_stale",
// "_stale_seconds", "_last_sync_timestamp_seconds", "_last_response_bytes"
// and "_stream_failures_total" (by gRPC code).
func (h *Health) Register(reg prometheus.Registerer, prefix string) error {
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: prefix + "_stale",
			Help: "1 when readiness fails because the xDS state is stale (see _stale_seconds), else 0."},
			func() float64 {
				h.mu.Lock()
				defer h.mu.Unlock()
				if h.checkLocked() != nil {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: prefix + "_stale_seconds",
			Help: "Seconds since the xDS client fell out of sync with the control plane (stream failing, response unreceivable, NACK); 0 when in sync. The last good state keeps serving meanwhile."},
			func() float64 {
				h.mu.Lock()
				defer h.mu.Unlock()
				if h.since.IsZero() {
					return 0
				}
				return h.timeNow().Sub(h.since).Seconds()
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: prefix + "_last_sync_timestamp_seconds",
			Help: "Unix time the xDS client was last known in sync with the control plane (0: never)."},
			func() float64 {
				h.mu.Lock()
				defer h.mu.Unlock()
				if h.syncedAt.IsZero() {
					return 0
				}
				return float64(h.syncedAt.UnixNano()) / 1e9
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: prefix + "_last_response_bytes",
			Help: "Size of the last xDS response received; compare with the receive limit."},
			func() float64 {
				h.mu.Lock()
				defer h.mu.Unlock()
				return float64(h.respBytes)
			}),
		failureCollector{h: h, desc: prometheus.NewDesc(prefix+"_stream_failures_total",
			"xDS streams that failed or could not be opened, by gRPC code (ResourceExhausted: a response over the receive limit).",
			[]string{"code"}, nil)},
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("xdsclient: metrics: %w", err)
		}
	}
	return nil
}

type failureCollector struct {
	h    *Health
	desc *prometheus.Desc
}

func (c failureCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c failureCollector) Collect(ch chan<- prometheus.Metric) {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	for code, n := range c.h.failures {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n), code.String())
	}
}

// shortType is the last element of a type URL.
func shortType(typeURL string) string {
	if i := strings.LastIndexByte(typeURL, '/'); i >= 0 {
		return typeURL[i+1:]
	}
	return typeURL
}
