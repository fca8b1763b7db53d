package cachenode

// The parts every node has (keyspace, certificates, HTTP, RESP, expiry).
// Each constructor returns its part ready to run, owning what it opened.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/command"
	"github.com/portico-io/portico/cachenode/expire"
	"github.com/portico-io/portico/cachenode/keyspace"
	"github.com/portico-io/portico/cachenode/metrics"
	"github.com/portico-io/portico/cachenode/namespace"
	"github.com/portico-io/portico/cachenode/repl"
	"github.com/portico-io/portico/cachenode/samples"
	"github.com/portico-io/portico/cachenode/server"
	"github.com/portico-io/portico/cachenode/topology"
	"github.com/portico-io/portico/internal/health"
	"github.com/portico-io/portico/internal/httpserver"
	"github.com/portico-io/portico/internal/tlsfiles"
)

// A part is one subsystem of a running node. run serves until ctx is done
// (or the part fails); close releases what the part owns (its listener)
// whether or not run was called, and may be called after run returned.
type part interface {
	run(ctx context.Context) error
	close()
}

// task is a part that owns nothing to release.
type task struct {
	r interface{ Run(context.Context) error }
}

func (t task) run(ctx context.Context) error { return t.r.Run(ctx) }
func (task) close()                          {}

// clock is cfg.Now, defaulted, in unix milliseconds.
func clock(cfg *Config) func() int64 {
	if cfg.Now == nil {
		return func() int64 { return time.Now().UnixMilli() }
	}
	return func() int64 { return cfg.Now().UnixMilli() }
}

// newKeyspace builds the sampled-keys ring and the namespace registry;
// with a feed (cluster mode) every change is logged for replicas.
func newKeyspace(cfg *Config, feed *repl.Feed) (*samples.Ring, *namespace.Registry) {
	now := clock(cfg)
	ring := samples.New(cfg.KeySamples, now)
	sink := ring.Add
	if cfg.HotKeySink != nil {
		sink = func(ns, key string) {
			ring.Add(ns, key)
			cfg.HotKeySink(ns, key)
		}
	}
	var observer keyspace.Observer
	if feed != nil {
		observer = feed
	}
	return ring, namespace.NewRegistry(namespace.RegistryConfig{Shards: cfg.Shards, HotKeySink: sink, Now: now, Observer: observer})
}

// loadNamespaces loads cfg.NamespacesFile into reg; the watcher re-reads it.
func loadNamespaces(cfg *Config, reg *namespace.Registry) (*namespace.Watcher, error) {
	w := &namespace.Watcher{Path: cfg.NamespacesFile, Registry: reg, Interval: cfg.ReloadInterval, Logger: cfg.Logger, OnCheck: cfg.OnReload}
	if err := w.Load(); err != nil {
		return nil, fmt.Errorf("cachenode: %w", err)
	}
	return w, nil
}

// certs are the node's certificate files, reloaded from loadCerts until
// close: the topology wait and a handover after ctx is done use them too.
// A nil *certs is a plaintext node.
type certs struct {
	files    *tlsfiles.Files
	node, kv *tls.Config // as a client of other nodes and of kvnode
	stop     context.CancelFunc
	done     chan struct{}
}

func loadCerts(ctx context.Context, cfg *Config) (*certs, error) {
	tc := cfg.TLS
	tc.Registerer, tc.MetricPrefix, tc.Logger = cfg.Registry, "portico_cachenode", cfg.Logger
	files, err := tlsfiles.LoadOrPlaintext(tc, cfg.InsecurePlaintext, plaintextWarning)
	if err != nil {
		return nil, fmt.Errorf("cachenode: RESP and the cluster bus need TLS: %w", err)
	}
	if files == nil {
		return nil, nil
	}
	c := &certs{files: files, node: files.ClientConfig(cacheNodes), kv: files.ClientConfig(kvNodes), done: make(chan struct{})}
	reload, stop := context.WithCancel(context.WithoutCancel(ctx))
	c.stop = stop
	go func() {
		defer close(c.done)
		_ = files.Run(reload)
	}()
	return c, nil
}

func (c *certs) close() {
	if c != nil {
		c.stop()
		<-c.done
	}
}

// nodeClient is the TLS configuration for calling other nodes (nil: plaintext).
func (c *certs) nodeClient() *tls.Config {
	if c == nil {
		return nil
	}
	return c.node
}

func (c *certs) kvClient() *tls.Config {
	if c == nil {
		return nil
	}
	return c.kv
}

// serveAPI wraps a RESP listener in TLS. The handshake runs in the
// connection's goroutine (its first read), never in the accept loop.
func (c *certs) serveAPI(l net.Listener) net.Listener {
	if c == nil {
		return l
	}
	return tls.NewListener(l, c.files.APIServerConfig())
}

// serveBus wraps the bus listener in mutual TLS admitting cachenode identities.
func (c *certs) serveBus(l net.Listener) net.Listener {
	if c == nil {
		return l
	}
	return tls.NewListener(l, c.files.ServerConfig(cacheNodes))
}

// newChecks are the health checks, starting with the RESP listener's.
func newChecks(up *atomic.Bool) *health.Checks {
	checks := health.New()
	checks.Add("resp", func(context.Context) error {
		if !up.Load() {
			return errors.New("RESP listener not serving")
		}
		return nil
	})
	return checks
}

// httpPart serves /metrics, /healthz and /readyz, plaintext (health and
// metrics only), from startHTTP until the ctx given to it is done or close.
type httpPart struct {
	lis  net.Listener
	stop context.CancelFunc
	done chan struct{}
	err  error // set before done is closed
}

func startHTTP(ctx context.Context, cfg *Config, checks *health.Checks) (*httpPart, error) {
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("cachenode: listen %s: %w", cfg.HTTPAddr, err)
	}
	h := &httpPart{lis: lis, done: make(chan struct{})}
	hctx, stop := context.WithCancel(ctx)
	h.stop = stop
	go func() {
		defer close(h.done)
		h.err = httpserver.Serve(hctx, lis, httpserver.Config{Gatherer: cfg.Registry, Health: checks, Logger: cfg.Logger})
	}()
	return h, nil
}

// run returns when the server fails on its own, or has shut down after
// ctx is done.
func (h *httpPart) run(ctx context.Context) error {
	select {
	case <-h.done:
	case <-ctx.Done():
		h.close()
	}
	return h.err
}

func (h *httpPart) close() {
	h.stop()
	<-h.done
}

// respPart is the client port. Its server is set once the engine is built.
type respPart struct {
	lis  net.Listener
	port int // listened on
	srv  atomic.Pointer[server.Server]
}

// listenRESP listens on cfg.RESPAddr (TLS with certificates); with a slot
// map it warns when the map advertises another port for this node.
func listenRESP(ctx context.Context, cfg *Config, c *certs, st *cluster.State) (*respPart, error) {
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.RESPAddr)
	if err != nil {
		return nil, fmt.Errorf("cachenode: listen %s: %w", cfg.RESPAddr, err)
	}
	r := &respPart{lis: c.serveAPI(lis)}
	if ta, ok := lis.Addr().(*net.TCPAddr); ok {
		r.port = ta.Port
	}
	if st != nil {
		if me := st.Load().Myself(); me.Port != r.port {
			// Legitimate behind port mapping; otherwise clients redirected here
			// by other nodes will not reach this one.
			cfg.Logger.Warn("cluster config advertises another port for this node", "node", me.ID, "advertised", me.Addr(), "listening", r.port)
		}
	}
	return r, nil
}

// clients counts the connected clients (0 before the server is built).
func (r *respPart) clients() int {
	if s := r.srv.Load(); s != nil {
		return s.Clients()
	}
	return 0
}

func (r *respPart) run(ctx context.Context) error { return r.srv.Load().Serve(ctx, r.lis) }
func (r *respPart) close()                        { r.lis.Close() }

// buildServer builds the command engine over every part it consults, and
// the RESP server on n.resp.
func (n *node) buildServer() error {
	cfg := &n.cfg
	ec := command.Config{Registry: n.reg, MaxMemory: cfg.MaxMemory, RequireAuth: cfg.RequireAuth,
		NodeID: cfg.NodeID, Port: n.resp.port, Clients: n.resp.clients, Observe: n.metrics.Observe, Now: cfg.Now, Cluster: n.state,
		Loading: &n.loading, Samples: n.ring, Hold: &n.hold,
		ScriptTimeLimit: cfg.ScriptTimeLimit, ScriptMaxMemory: cfg.ScriptMaxMemory, ScriptCacheEvalMax: cfg.ScriptCacheEvalMax,
		ScriptCacheBytes: cfg.ScriptCacheBytes}
	if n.migrate != nil {
		ec.Moves = n.migrate.mover.Status
	}
	if n.repl != nil {
		ec.ReplicationInfo, ec.Replication = n.repl.info, n.repl.position
	}
	if n.monitor != nil {
		// A primary takes writes only while the store confirms its role.
		ec.WriteFence = n.monitor.WriteFence
	}
	var err error
	if n.eng, err = command.New(ec); err != nil {
		return fmt.Errorf("cachenode: %w", err)
	}
	if err := registerScriptMetrics(cfg.Registry, n.eng); err != nil {
		return fmt.Errorf("cachenode: metrics: %w", err)
	}
	srv, err := server.New(server.Config{Engine: n.eng, MaxClients: cfg.MaxClients, Loops: cfg.EventLoops, Logger: cfg.Logger})
	if err != nil {
		return fmt.Errorf("cachenode: %w", err)
	}
	n.resp.srv.Store(srv)
	return nil
}

// newMetrics registers the node's metrics, and the slot map's in cluster
// mode (with the store's status when there is one).
func newMetrics(cfg *Config, reg *namespace.Registry, clients func() int, st *cluster.State, syncer *topology.Syncer) (*metrics.Metrics, error) {
	m, err := metrics.New(cfg.Registry, reg, cfg.MaxMemory, clients)
	if err != nil {
		return nil, fmt.Errorf("cachenode: metrics: %w", err)
	}
	if st != nil {
		var topo func() topology.Status
		if syncer != nil {
			topo = syncer.Status
		}
		if err := metrics.RegisterCluster(cfg.Registry, st, topo); err != nil {
			return nil, fmt.Errorf("cachenode: metrics: %w", err)
		}
	}
	return m, nil
}

// registerScriptMetrics exports the script cache's size and evictions.
func registerScriptMetrics(r prometheus.Registerer, eng *command.Engine) error {
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "portico_cachenode_scripts_cached",
			Help: "Lua scripts in the script cache, every namespace's."}, func() float64 { return float64(eng.ScriptsCached()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "portico_cachenode_scripts_evicted_total",
			Help: "Scripts cached by EVAL evicted from the script cache (least recently used first)."}, func() float64 { return float64(eng.ScriptsEvicted()) }),
	} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// newCycler expires keys actively in every namespace.
func newCycler(cfg *Config, reg *namespace.Registry) *expire.Cycler {
	return expire.New(expire.Config{Targets: func() []expire.Target {
		all := reg.All()
		out := make([]expire.Target, len(all))
		for i, n := range all {
			out[i] = n.DB
		}
		return out
	}, OnCycle: cfg.OnExpireCycle})
}
