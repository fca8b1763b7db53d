// Package throttle carries throttle events — requests a rule denied (or, in
// shadow mode, would have denied) — from the request path to a sink through
// a bounded queue. Publishing never blocks: when the queue is full the
// event is dropped and counted, so a slow sink cannot slow a request.
package throttle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Event is one throttled descriptor.
type Event struct {
	Time   time.Time
	Domain string
	Rule   string // rule ID
	// Descriptor is the request's entries, "k=v&k=v" (values as sent).
	Descriptor string
	Tenant     string
	// Shadow: a shadow rule would have denied; the request was allowed.
	Shadow bool
}

// Sink receives events in order, from one goroutine.
type Sink interface {
	Throttled(ctx context.Context, e Event)
}

// LogSink writes one structured log line per event (the default sink).
type LogSink struct{ Logger *slog.Logger }

// Throttled logs e at info level.
func (s LogSink) Throttled(ctx context.Context, e Event) {
	s.Logger.LogAttrs(ctx, slog.LevelInfo, "rate limited",
		slog.Time("at", e.Time), slog.String("domain", e.Domain), slog.String("rule", e.Rule),
		slog.String("descriptor", e.Descriptor), slog.String("tenant", e.Tenant), slog.Bool("shadow", e.Shadow))
}

// DefaultSize is the default queue capacity.
const DefaultSize = 4096

// Config configures a Queue. Zero values take defaults.
type Config struct {
	// Sink receives the events (default LogSink on Logger).
	Sink Sink
	// Size is the queue capacity (default DefaultSize).
	Size   int
	Logger *slog.Logger
	// Registerer receives portico_ratelimitsvc_throttle_events_total
	// (default: a private registry).
	Registerer prometheus.Registerer
}

// Queue is the bounded queue between the request path and the sink.
// Publish is safe for concurrent use; Run must be called once.
type Queue struct {
	ch              chan Event
	sink            Sink
	queued, dropped prometheus.Counter
	delivered       prometheus.Counter
}

// New validates cfg and returns a Queue.
func New(cfg Config) (*Queue, error) {
	if cfg.Size < 0 {
		return nil, errors.New("throttle: Config.Size must not be negative")
	}
	if cfg.Size == 0 {
		cfg.Size = DefaultSize
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Sink == nil {
		cfg.Sink = LogSink{Logger: cfg.Logger}
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	events := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "portico_ratelimitsvc_throttle_events_total",
		Help: "Throttle events by result: queued, dropped (queue full), delivered (to the sink).",
	}, []string{"result"})
	if err := cfg.Registerer.Register(events); err != nil {
		return nil, fmt.Errorf("throttle: metrics: %w", err)
	}
	return &Queue{ch: make(chan Event, cfg.Size), sink: cfg.Sink,
		queued: events.WithLabelValues("queued"), dropped: events.WithLabelValues("dropped"),
		delivered: events.WithLabelValues("delivered")}, nil
}

// Publish queues e, or drops and counts it when the queue is full. It
// never blocks; it reports whether e was queued.
func (q *Queue) Publish(e Event) bool {
	select {
	case q.ch <- e:
		q.queued.Inc()
		return true
	default:
		q.dropped.Inc()
		return false
	}
}

// Run delivers events to the sink until ctx is done; events still queued
// then are dropped with the process (they are best effort by contract).
func (q *Queue) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-q.ch:
			q.sink.Throttled(ctx, e)
			q.delivered.Inc()
		}
	}
}
