package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/controlplane/store"
	"github.com/portico-io/portico/controlplane/xds"
)

// publisher follows the store's head version, compiles each new version
// and publishes it to the xDS server. Versions only move forward; a version
// that fails to load or compile is retried on the next notification or poll
// while clients keep the last published snapshot.
type publisher struct {
	st *store.Store
	xs *xds.Server
	// compiler reuses the ApiKeyShards of the last version it compiled,
	// so one key change rebuilds one shard, not every key.
	compiler *compile.Compiler
	log      *slog.Logger

	published atomic.Int64
	first     chan struct{}
	firstOnce sync.Once

	compileSeconds prometheus.Histogram
	failures       prometheus.Counter
}

func newPublisher(st *store.Store, xs *xds.Server, opts compile.Options, reg prometheus.Registerer, log *slog.Logger) *publisher {
	p := &publisher{
		st: st, xs: xs, compiler: compile.NewCompiler(opts), log: log,
		first: make(chan struct{}),
		compileSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "portico_controlplane_compile_seconds",
			Help:    "Time to load and compile one config version into a snapshot.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portico_controlplane_publish_failures_total",
			Help: "Config versions that could not be loaded or compiled (retried).",
		}),
	}
	p.published.Store(-1)
	reg.MustRegister(p.compileSeconds, p.failures)
	return p
}

// ready is the readiness check: a snapshot has been published.
func (p *publisher) ready(context.Context) error {
	if p.published.Load() < 0 {
		return errors.New("no snapshot published yet")
	}
	return nil
}

func (p *publisher) run(ctx context.Context) error {
	versions := p.st.Watch(ctx)
	for {
		head, err := p.st.Head(ctx)
		if err == nil {
			err = p.publish(ctx, head)
		}
		if err == nil {
			break
		}
		p.log.Error("controlplane: initial publish failed, retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case v, ok := <-versions:
			if !ok {
				return nil
			}
			if v <= p.published.Load() {
				continue
			}
			if err := p.publish(ctx, v); err != nil && ctx.Err() == nil {
				p.log.Error("controlplane: publish failed; clients keep the last snapshot", "version", v, "err", err)
			}
		}
	}
}

// snapshot loads and compiles version v (0 is the empty config). The
// rollout controller uses it for baseline and target versions.
func (p *publisher) snapshot(ctx context.Context, v int64) (cache.ResourceSnapshot, error) {
	start := time.Now()
	cfg := spec.NewConfig(0)
	if v > 0 {
		var err error
		if cfg, err = p.st.ConfigAt(ctx, v); err != nil {
			return nil, fmt.Errorf("load version %d: %w", v, err)
		}
	}
	snap, err := p.compiler.Compile(cfg)
	if err != nil {
		return nil, fmt.Errorf("compile version %d: %w", v, err)
	}
	p.compileSeconds.Observe(time.Since(start).Seconds())
	return snap, nil
}

func (p *publisher) publish(ctx context.Context, v int64) error {
	start := time.Now()
	// Publish the newest version (at least v): when versions arrive faster
	// than they compile, the ones in between are skipped. Only the head's
	// config is kept in memory, so compiling an older one would first
	// read all of it (a million keys) back from the database.
	cfg, err := p.st.HeadConfig(ctx)
	if err == nil && cfg.Version < v {
		err = fmt.Errorf("head %d is behind notified version %d", cfg.Version, v)
	}
	if err != nil {
		p.failures.Inc()
		return fmt.Errorf("load head: %w", err)
	}
	snap, err := p.compiler.Compile(cfg)
	if err != nil {
		p.failures.Inc()
		return fmt.Errorf("compile version %d: %w", cfg.Version, err)
	}
	p.compileSeconds.Observe(time.Since(start).Seconds())
	if err := p.xs.Publish(ctx, snap); err != nil {
		p.failures.Inc()
		return err
	}
	p.published.Store(cfg.Version)
	p.firstOnce.Do(func() { close(p.first) })
	p.log.Info("controlplane: published", "version", cfg.Version, "took", time.Since(start))
	return nil
}
