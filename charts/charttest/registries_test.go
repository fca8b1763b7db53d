package charttest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/portico-io/portico/cachenode"
	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/failover"
	cachemetrics "github.com/portico-io/portico/cachenode/metrics"
	"github.com/portico-io/portico/cachenode/topology"
	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/cptest"
	"github.com/portico-io/portico/extauthz"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlstest"
	"github.com/portico-io/portico/kvnode"
	"github.com/portico-io/portico/kvnode/cp"
	"github.com/portico-io/portico/ratelimitsvc"
	schedmetrics "github.com/portico-io/portico/scheduler/metrics"
)

// componentRegistries builds, per component, the Prometheus registries its
// metrics live in, the way the component builds them: each component's Run
// (or kvnode's New and Start) is started in-process with a registry of the
// test's, in the mode that registers the most (the control plane with
// certificate files, extauthz and ratelimitsvc
// as xDS clients, kvnode with its Raft tier, cachenode in cluster mode),
// and left running until the test ends. Two pieces are built from the
// constructors Run calls instead of Run itself, each said below: the
// scheduler's (Run makes its registry itself) and cachenode's topology-
// store mode (it needs a kvnode Raft group holding a slot map).
func componentRegistries(t *testing.T) map[string][]*prometheus.Registry {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	log := slog.New(slog.DiscardHandler)
	// An xDS address nobody answers: the clients register their staleness
	// metrics at start and keep retrying in the background.
	deadXDS := "127.0.0.1:1"
	out := map[string][]*prometheus.Registry{}

	cpReg := prometheus.NewRegistry()
	cpReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// With certificate files, as the chart runs it: the TLS metrics too.
	cptest.Start(t, controlplane.Config{DatabaseURL: testdeps.Postgres(t), Registry: cpReg, Logger: log,
		TLS: tlstest.New(t).Files(t, identity.ControlPlane, "charttest")})
	out["controlplane"] = []*prometheus.Registry{cpReg}

	eaReg := newProcessRegistry()
	runUntilReady(t, ctx, "extauthz", func(ctx context.Context, ready chan<- extauthz.Addrs) error {
		return extauthz.Run(ctx, extauthz.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", XDSAddr: deadXDS, NodeID: "charttest",
			StateDir: t.TempDir(), InsecurePlaintext: true, Logger: log, Registry: eaReg, Ready: ready})
	})
	out["extauthz"] = []*prometheus.Registry{eaReg}

	rlReg := newProcessRegistry()
	runUntilReady(t, ctx, "ratelimitsvc", func(ctx context.Context, ready chan<- ratelimitsvc.Addrs) error {
		return ratelimitsvc.Run(ctx, ratelimitsvc.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", XDSAddr: deadXDS, NodeID: "charttest",
			StateDir: t.TempDir(), InsecurePlaintext: true, Logger: log, Registry: rlReg, Ready: ready})
	})
	out["ratelimitsvc"] = []*prometheus.Registry{rlReg}

	// scheduler.Run makes its registry itself from exactly these
	// (scheduler.go): the Go and process collectors, metrics.New and the
	// run-state collector over the store.
	scReg := newProcessRegistry()
	schedmetrics.New(scReg)
	scReg.MustRegister(schedmetrics.NewStateCollector(nil, log))
	out["scheduler"] = []*prometheus.Registry{scReg}

	kvReg := prometheus.NewRegistry()
	n, err := kvnode.New(kvnode.Config{NodeID: "n0", DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
		Replication: 1, InsecurePlaintext: true, NoSync: true, Logger: log, Registry: kvReg,
		CPKeyspaces: []string{"cache"}, CP: cp.Config{BindAddr: "127.0.0.1:0", Bootstrap: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop() })
	out["kvnode"] = []*prometheus.Registry{kvReg}

	// cachenode in cluster mode from a static slot map: the node, cluster,
	// replication and migration metrics.
	cnReg := newProcessRegistry()
	spec := filepath.Join(t.TempDir(), "cluster.json")
	if err := os.WriteFile(spec, []byte(`{"epoch": 1, "nodes": [{"id": "c0", "host": "127.0.0.1", "port": 1, "slots": ["0-16383"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	runUntilReady(t, ctx, "cachenode", func(ctx context.Context, ready chan<- cachenode.Addrs) error {
		return cachenode.Run(ctx, cachenode.Config{RESPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", BusAddr: "127.0.0.1:0", NodeID: "c0",
			ClusterConfig: spec, InsecurePlaintext: true, Logger: log, Registry: cnReg, Ready: ready})
	})
	// With a topology store (ClusterKVAddrs), Run also registers the
	// store's gauges and the failover monitor's metrics: the same two
	// calls, on a registry of their own (nothing is dialled).
	m, err := cluster.Parse([]byte(`{"epoch": 1, "nodes": [{"id": "c0", "host": "127.0.0.1", "port": 1, "slots": ["0-16383"]}]}`), "c0")
	if err != nil {
		t.Fatal(err)
	}
	state := cluster.NewState(m)
	topoReg := prometheus.NewRegistry()
	if err := cachemetrics.RegisterCluster(topoReg, state, func() topology.Status { return topology.Status{} }); err != nil {
		t.Fatal(err)
	}
	if _, err := failover.New(failover.Config{Client: &topology.Client{Addrs: []string{"127.0.0.1:1"}, Cluster: "charttest"},
		State: state, SelfID: "c0", Logger: log, Registerer: topoReg}); err != nil {
		t.Fatal(err)
	}
	out["cachenode"] = []*prometheus.Registry{cnReg, topoReg}
	return out
}

func newProcessRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// runUntilReady runs a component until ctx ends, returning once it said it
// is ready (its metrics are registered by then).
func runUntilReady[A any](t *testing.T, ctx context.Context, name string, run func(context.Context, chan<- A) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	ready := make(chan A, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, ready) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		done <- err
		t.Fatalf("%s exited before it was ready: %v", name, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s not ready after 30s", name)
	}
}

// registered reports whether reg holds a metric family named name, even
// one with no series yet (a vector no label values were seen for, which
// Gather leaves out). client_golang refuses a collector whose descriptor
// reuses a registered name with another help string, and accepts it when
// the name is free (the probe is unregistered again).
func registered(reg *prometheus.Registry, name string) (bool, error) {
	probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "charttest probe for " + name})
	err := reg.Register(probe)
	if err == nil {
		reg.Unregister(probe)
		return false, nil
	}
	if strings.Contains(err.Error(), "previously registered descriptor with the same fully-qualified name") {
		return true, nil
	}
	return false, fmt.Errorf("probe %s: %w", name, err)
}

// inRegistries finds name, or the histogram or summary it is a series of
// (_bucket, _sum, _count), in any of regs.
func inRegistries(regs []*prometheus.Registry, name string) (bool, error) {
	candidates := []string{name}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			candidates = append(candidates, base)
		}
	}
	for _, reg := range regs {
		for _, c := range candidates {
			ok, err := registered(reg, c)
			if err != nil || ok {
				return ok, err
			}
		}
	}
	return false, nil
}

// TestRegistryProbe checks the probe itself on a registry whose contents
// are known: a vector without series, a histogram's series, a missing name.
func TestRegistryProbe(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"a"}),
		prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h_seconds", Help: "h"}))
	for name, want := range map[string]bool{"x_total": true, "h_seconds_bucket": true, "h_seconds_count": true, "x": false, "y_total": false, "h_seconds_bucket_bucket": false} {
		got, err := inRegistries([]*prometheus.Registry{reg}, name)
		if err != nil || got != want {
			t.Errorf("inRegistries(%s) = %v, %v; want %v", name, got, err, want)
		}
	}
	// The probe leaves nothing behind.
	if mfs, _ := reg.Gather(); len(mfs) != 1 || mfs[0].GetName() != "h_seconds" {
		t.Errorf("after probing the registry gathers %v", mfs)
	}
}
