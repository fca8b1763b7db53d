// Package cachenode runs one Portico cache node: a Redis-protocol (RESP2 and
// RESP3) in-memory cache with namespaces (per-tenant quota, eviction policy,
// default TTL, value-size and rate limits), lazy and active expiry, hot-key
// sampling and per-namespace metrics. RESP on :7000, HTTP /metrics,
// /healthz, /readyz on :18700.
//
// With certificate files (Config.TLS) RESP speaks TLS only and the node
// presents its cachenode identity to every peer it calls; without them it
// runs only when plaintext is asked for explicitly (InsecurePlaintext).
// Health and metrics stay plaintext.
//
// With ClusterConfig it is one node of a Redis-Cluster-style cluster
// (package cluster): MOVED/CROSSSLOT and the CLUSTER commands, so cluster
// clients work unchanged. With ClusterKVAddrs the slot map comes from
// kvnode's consensus tier instead of a file (package topology). Resharding,
// replication and failover are later steps.
package cachenode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/portico-io/portico/cachenode/bus"
	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/command"
	"github.com/portico-io/portico/cachenode/expire"
	"github.com/portico-io/portico/cachenode/failover"
	"github.com/portico-io/portico/cachenode/keyspace"
	"github.com/portico-io/portico/cachenode/metrics"
	"github.com/portico-io/portico/cachenode/migrate"
	"github.com/portico-io/portico/cachenode/namespace"
	"github.com/portico-io/portico/cachenode/repl"
	"github.com/portico-io/portico/cachenode/reshard"
	"github.com/portico-io/portico/cachenode/samples"
	"github.com/portico-io/portico/cachenode/server"
	"github.com/portico-io/portico/cachenode/topology"
	"github.com/portico-io/portico/internal/health"
	"github.com/portico-io/portico/internal/httpserver"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlsfiles"
)

// Defaults (ARCHITECTURE.md ports).
const (
	DefaultRESPAddr = ":7000"
	DefaultHTTPAddr = ":18700"
)

// cacheNodes admits the identities that may use the bus port (replication
// streams, slot imports) and that this node accepts as the server when it
// calls another node's bus or RESP port.
var cacheNodes = identity.Policy{Roles: []identity.Role{identity.CacheNode}}

// kvNodes is the identity this node accepts as the topology store's server.
var kvNodes = identity.Policy{Roles: []identity.Role{identity.KVNode}}

const plaintextWarning = "cachenode: PLAINTEXT (--insecure-plaintext): RESP carries AUTH secrets and values in clear, " +
	"and in cluster mode anyone who reaches the bus can SYNC the whole dataset; use only for debugging and benchmarks"

// Config configures Run. Zero values take defaults.
type Config struct {
	NodeID   string
	RESPAddr string
	HTTPAddr string
	// NamespacesFile is a YAML namespaces file (see package namespace),
	// re-read every ReloadInterval; empty = only the default namespace.
	NamespacesFile string
	ReloadInterval time.Duration
	// ClusterConfig, when set, runs the node in cluster mode with the
	// static slot map in this file (see package cluster), re-read every
	// ReloadInterval; a change must raise its epoch.
	ClusterConfig string
	// ClusterKVAddrs and ClusterName, when set (instead of ClusterConfig),
	// run the node in cluster mode with the slot map stored in kvnode's
	// consensus tier (see package topology) under ClusterKVKeyspace
	// (default "cache") key "<ClusterName>/topology": loaded at start
	// (Run waits until a map listing this node is stored) and followed
	// with a watch. kvnode is never on a command's path.
	ClusterKVAddrs    []string
	ClusterName       string
	ClusterKVKeyspace string
	// ClusterTopologyCheck is the period of the read confirming the store
	// is reachable (default 5 s); the map is reported stale after three
	// periods without contact.
	ClusterTopologyCheck time.Duration
	// BusAddr is the node-to-node listen address in cluster mode (default
	// ":<this node's bus port in the map>", RESP port + 10000 unless the
	// map says otherwise): slot imports and replication.
	BusAddr string
	// ClusterSecret, when set, is required (AUTH) on the bus port and
	// presented to peers.
	ClusterSecret string
	// TLS names this node's certificate files (role cachenode), reloaded
	// when they change. The RESP port then speaks TLS only, as
	// redis-server's tls-port with tls-auth-clients optional: a client
	// certificate is optional, one presented must be of the trust domain,
	// and AUTH still decides what a client may do. In cluster mode the bus
	// port admits only cachenode identities over mutual TLS; the node
	// presents this certificate to its peers' bus and RESP ports (probes,
	// handovers), and to kvnode (topology store over https). Without files
	// the node refuses to start unless InsecurePlaintext is set (debugging,
	// tests and benchmarks only): then every port is plaintext.
	TLS               tlsfiles.Config
	InsecurePlaintext bool
	// MigrateKeysPerSecond limits how fast this node copies out slots it
	// migrates (default migrate.DefaultKeysPerSec).
	MigrateKeysPerSecond float64
	// Failover runs automatic failover (package failover) in topology-store
	// mode: failure reports, quorum decisions, promotions and the write
	// lease. FailoverInterval, FailAfter and FailoverLease default to the
	// package's (500 ms, 3 s, 2 s).
	Failover         bool
	FailoverInterval time.Duration
	FailAfter        time.Duration
	FailoverLease    time.Duration
	FailoverHold     time.Duration
	// HandoverOnShutdown: in topology-store mode, a primary stopping (ctx
	// done) first stops writes, waits for a replica to acknowledge them and
	// publishes the map promoting it (see failover.Handover), so a rolling
	// restart moves its slots in well under a second without losing writes.
	HandoverOnShutdown bool
	// ReplBacklogBytes is the replication backlog (default
	// repl.DefaultBacklogBytes): a replica that falls further behind, or
	// reconnects later, needs a full resync.
	ReplBacklogBytes int
	// MaxMemory is the node-wide limit in bytes (0 = unlimited).
	MaxMemory int64
	// RequireAuth refuses commands before AUTH <namespace> <secret>.
	RequireAuth bool
	// Shards per namespace keyspace (default keyspace.DefaultShards).
	Shards int
	// MaxClients caps connections (default server.DefaultMaxClients).
	MaxClients int
	// ScriptTimeLimit is how long a Lua script runs before the other
	// connections of its namespace get -BUSY and SCRIPT KILL may stop it
	// (default command.DefaultScriptTimeLimit, Redis's 5 s).
	ScriptTimeLimit time.Duration
	// ScriptMaxMemory bounds what one Lua script may allocate (default
	// script.DefaultMaxMemory); ScriptCacheEvalMax and ScriptCacheBytes
	// bound each namespace's script cache (command.Config has the policy).
	ScriptMaxMemory    int64
	ScriptCacheEvalMax int
	ScriptCacheBytes   int64
	// KeySamples is how many recent sampled key accesses the node keeps
	// for CACHE SAMPLES (default 65536).
	KeySamples int
	// HotKeySink receives every sampled key access (the optional sample
	// stream) besides the node's own ring; it must not block.
	HotKeySink func(namespace, key string)
	Logger     *slog.Logger
	Registry   *prometheus.Registry
	// Now is the clock for TTLs, rate limits and LRU/LFU (default
	// time.Now); tests inject one.
	Now func() time.Time
	// OnExpireCycle and OnReload, when set, are called after each active
	// expiry cycle and each namespaces-file check (test signals).
	OnExpireCycle func(expire.Stats)
	OnReload      func(applied bool, err error)
	// OnClusterReload is called after each check that found the cluster
	// config changed (a test signal).
	OnClusterReload func(applied bool, err error)
	// OnTopologyApply is called after each stored topology change was
	// installed or refused (a test signal).
	OnTopologyApply func(epoch uint64, err error)
	// Ready, when set, receives the listening addresses (a test hook).
	Ready chan<- Addrs
}

// Addrs are the addresses the node listens on (Bus in cluster mode).
type Addrs struct{ RESP, HTTP, Bus string }

func (c *Config) defaults() {
	if c.RESPAddr == "" {
		c.RESPAddr = DefaultRESPAddr
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.NodeID == "" {
		h, _ := os.Hostname()
		c.NodeID = fmt.Sprintf("cachenode-%s-%d", h, os.Getpid())
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
		c.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
}

// Run serves until ctx is done.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	if cfg.MaxMemory < 0 {
		return fmt.Errorf("cachenode: MaxMemory %d is negative", cfg.MaxMemory)
	}
	log := cfg.Logger
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	clusterMode := cfg.ClusterConfig != "" || len(cfg.ClusterKVAddrs) > 0 || cfg.ClusterName != ""
	var feed *repl.Feed
	var observer keyspace.Observer
	if clusterMode {
		// Every change is logged for replicas from the start, so a replica
		// that connects later can continue from the backlog.
		feed = repl.NewFeed(repl.FeedConfig{BacklogBytes: cfg.ReplBacklogBytes})
		observer = feed
	}
	ring := samples.New(cfg.KeySamples, func() int64 { return now().UnixMilli() })
	sink := ring.Add
	if cfg.HotKeySink != nil {
		sink = func(ns, key string) {
			ring.Add(ns, key)
			cfg.HotKeySink(ns, key)
		}
	}
	reg := namespace.NewRegistry(namespace.RegistryConfig{Shards: cfg.Shards, HotKeySink: sink,
		Now: func() int64 { return now().UnixMilli() }, Observer: observer})
	var watcher *namespace.Watcher
	if cfg.NamespacesFile != "" {
		watcher = &namespace.Watcher{Path: cfg.NamespacesFile, Registry: reg, Interval: cfg.ReloadInterval, Logger: log, OnCheck: cfg.OnReload}
		if err := watcher.Load(); err != nil {
			return fmt.Errorf("cachenode: %w", err)
		}
	}
	var clusterWatcher *cluster.Watcher
	var clusterState *cluster.State
	if cfg.ClusterConfig != "" {
		clusterWatcher = &cluster.Watcher{Path: cfg.ClusterConfig, SelfID: cfg.NodeID, Interval: cfg.ReloadInterval,
			Logger: log, OnCheck: cfg.OnClusterReload}
		st, err := clusterWatcher.Load()
		if err != nil {
			return fmt.Errorf("cachenode: %w", err)
		}
		clusterState = st
	}
	tc := cfg.TLS
	tc.Registerer, tc.MetricPrefix, tc.Logger = cfg.Registry, "portico_cachenode", log
	files, err := tlsfiles.LoadOrPlaintext(tc, cfg.InsecurePlaintext, plaintextWarning)
	if err != nil {
		return fmt.Errorf("cachenode: RESP and the cluster bus need TLS: %w", err)
	}
	var nodeTLS, kvTLS *tls.Config // as a client of other nodes and of kvnode
	if files != nil {
		nodeTLS, kvTLS = files.ClientConfig(cacheNodes), files.ClientConfig(kvNodes)
		// Reloaded from now until Run returns: the topology wait and a
		// handover after ctx is done use the certificate too.
		reload, stopReload := context.WithCancel(context.WithoutCancel(ctx))
		reloaded := make(chan struct{})
		go func() {
			defer close(reloaded)
			_ = files.Run(reload)
		}()
		defer func() {
			stopReload()
			<-reloaded
		}()
	}
	// HTTP serves from the start: /healthz answers (and /readyz explains)
	// while the node waits for a slot map, so an orchestrator does not
	// restart a node that is only waiting. It stays plaintext: health and
	// metrics only.
	httpLis, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("cachenode: listen %s: %w", cfg.HTTPAddr, err)
	}
	var up atomic.Bool
	checks := health.New()
	checks.Add("resp", func(context.Context) error {
		if !up.Load() {
			return errors.New("RESP listener not serving")
		}
		return nil
	})
	httpCtx, stopHTTP := context.WithCancel(ctx)
	httpDone := make(chan error, 1)
	go func() {
		httpDone <- httpserver.Serve(httpCtx, httpLis, httpserver.Config{Gatherer: cfg.Registry, Health: checks, Logger: log})
	}()
	httpOwned := false // by the errgroup, once serving
	defer func() {
		if !httpOwned {
			stopHTTP()
			<-httpDone
		}
	}()

	var syncer *topology.Syncer
	if len(cfg.ClusterKVAddrs) > 0 || cfg.ClusterName != "" {
		if cfg.ClusterConfig != "" {
			return errors.New("cachenode: a cluster config file and a topology store are exclusive")
		}
		syncer = &topology.Syncer{Client: &topology.Client{Addrs: cfg.ClusterKVAddrs, Cluster: cfg.ClusterName, Keyspace: cfg.ClusterKVKeyspace, TLS: kvTLS},
			SelfID: cfg.NodeID, CheckInterval: cfg.ClusterTopologyCheck, Logger: log, OnApply: cfg.OnTopologyApply}
		if err := syncer.Client.Validate(); err != nil {
			return fmt.Errorf("cachenode: %w", err)
		}
		checks.Add("cluster-topology", func(context.Context) error {
			return fmt.Errorf("waiting for a slot map listing node %s (cluster %s): %s", cfg.NodeID, cfg.ClusterName, syncer.Status().Err)
		})
		st, err := syncer.Load(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped while waiting for a map
			}
			return fmt.Errorf("cachenode: %w", err)
		}
		clusterState = st
		log.Info("cluster topology loaded", "cluster", cfg.ClusterName, "epoch", st.Load().Epoch, "revision", syncer.Status().Revision)
	}
	respLis, err := net.Listen("tcp", cfg.RESPAddr)
	if err != nil {
		return fmt.Errorf("cachenode: listen %s: %w", cfg.RESPAddr, err)
	}
	serving := false
	defer func() {
		if !serving { // an error before the servers own the listeners
			respLis.Close()
		}
	}()
	port := 0
	if ta, ok := respLis.Addr().(*net.TCPAddr); ok {
		port = ta.Port
	}
	if files != nil {
		// The handshake runs in the connection's goroutine (its first
		// read), never in the accept loop.
		respLis = tls.NewListener(respLis, files.APIServerConfig())
	}

	if clusterState != nil {
		if me := clusterState.Load().Myself(); me.Port != port {
			// Legitimate behind port mapping; otherwise clients redirected here
			// by other nodes will not reach this one.
			log.Warn("cluster config advertises another port for this node", "node", me.ID, "advertised", me.Addr(), "listening", port)
		}
	}
	var srv *server.Server
	clients := func() int {
		if srv == nil {
			return 0
		}
		return srv.Clients()
	}
	m, err := metrics.New(cfg.Registry, reg, cfg.MaxMemory, clients)
	if err != nil {
		return fmt.Errorf("cachenode: metrics: %w", err)
	}
	if clusterState != nil {
		var topo func() topology.Status
		if syncer != nil {
			topo = syncer.Status
		}
		if err := metrics.RegisterCluster(cfg.Registry, clusterState, topo); err != nil {
			return fmt.Errorf("cachenode: metrics: %w", err)
		}
	}
	var (
		busLis net.Listener
		busSrv *bus.Server
		mover  *migrate.Mover
		sender *migrate.BusSender
		moves  func() []cluster.MoveStatus

		primary  *repl.Primary
		follower *repl.Follower
		replInfo func() string
		replPos  func() (int64, bool)
		loading  atomic.Bool // a full sync is being applied
	)
	// Replicated and imported keys serve the clients blocked on them. The
	// engine is built below, before the bus and the follower start.
	var eng *command.Engine
	keyStored := func(ns string, key []byte) { eng.KeyStored(ns, key) }
	if clusterState != nil {
		addr := cfg.BusAddr
		if addr == "" {
			addr = ":" + strconv.Itoa(clusterState.Load().Myself().BusPort)
		}
		if busLis, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("cachenode: listen %s (bus): %w", addr, err)
		}
		defer func() {
			if !serving {
				busLis.Close()
			}
		}()
		peer := bus.Peer{Secret: cfg.ClusterSecret, TLS: nodeTLS}
		if files != nil {
			busLis = tls.NewListener(busLis, files.ServerConfig(cacheNodes))
		}
		busSrv = &bus.Server{Secret: cfg.ClusterSecret, Logger: log}
		busSrv.Handle(migrate.ImportCommand, migrate.ImportHandler(clusterState, reg, keyStored))
		sender = &migrate.BusSender{Bus: peer}
		mover, err = migrate.New(migrate.Config{State: clusterState, Registry: reg, Send: sender.Send,
			KeysPerSecond: cfg.MigrateKeysPerSecond, Logger: log, Registerer: cfg.Registry})
		if err != nil {
			return fmt.Errorf("cachenode: %w", err)
		}
		moves = mover.Status
		rm, err := repl.NewMetrics(cfg.Registry, feed)
		if err != nil {
			return fmt.Errorf("cachenode: metrics: %w", err)
		}
		primary = repl.NewPrimary(repl.PrimaryConfig{Feed: feed, Registry: reg, Logger: log, Metrics: rm,
			Serving: func() bool { return !clusterState.Load().Myself().IsReplica() }})
		primary.Register(busSrv)
		// Acks every 100 ms: what a primary handing over waits for.
		follower = repl.NewFollower(repl.FollowerConfig{Registry: reg, Bus: peer, Logger: log, Metrics: rm, AckInterval: 100 * time.Millisecond,
			Stored: keyStored, Announce: net.JoinHostPort(clusterState.Load().Myself().Host, strconv.Itoa(port))})
		replInfo = func() string { return repl.Info(feed, primary, follower) }
		replPos = func() (int64, bool) {
			if st := follower.Status(); st.Primary != "" {
				return st.Offset, st.Syncing
			}
			return feed.Offset(), false
		}
	}
	var monitor *failover.Monitor
	if syncer != nil && cfg.Failover {
		monitor, err = failover.New(failover.Config{Client: syncer.Client, State: clusterState, SelfID: cfg.NodeID, TLS: nodeTLS,
			Interval: cfg.FailoverInterval, FailAfter: cfg.FailAfter, Lease: cfg.FailoverLease, PromotionHold: cfg.FailoverHold,
			ReplOffset: func() int64 { o, _ := replPos(); return o }, Logger: log, Registerer: cfg.Registry})
		if err != nil {
			return fmt.Errorf("cachenode: %w", err)
		}
		// A primary takes writes only once the store confirmed its role.
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := monitor.Confirm(cctx); err != nil {
			log.Warn("failover: the store did not confirm this node's role yet; writes wait for it", "err", err)
		}
		cancel()
	}
	var fence func() string
	if monitor != nil {
		fence = monitor.WriteFence
	}
	var handingOver atomic.Bool // holds commands during a handover
	eng, err = command.New(command.Config{Registry: reg, MaxMemory: cfg.MaxMemory, RequireAuth: cfg.RequireAuth,
		NodeID: cfg.NodeID, Port: port, Clients: clients, Observe: m.Observe, Now: cfg.Now, Cluster: clusterState, Moves: moves,
		ReplicationInfo: replInfo, Replication: replPos, WriteFence: fence, Loading: &loading, Samples: ring, Hold: &handingOver,
		ScriptTimeLimit: cfg.ScriptTimeLimit, ScriptMaxMemory: cfg.ScriptMaxMemory, ScriptCacheEvalMax: cfg.ScriptCacheEvalMax,
		ScriptCacheBytes: cfg.ScriptCacheBytes})
	if err != nil {
		return fmt.Errorf("cachenode: %w", err)
	}
	if err := registerScriptMetrics(cfg.Registry, eng); err != nil {
		return fmt.Errorf("cachenode: metrics: %w", err)
	}
	srv, err = server.New(server.Config{Engine: eng, MaxClients: cfg.MaxClients, Logger: log})
	if err != nil {
		return fmt.Errorf("cachenode: %w", err)
	}
	cycler := expire.New(expire.Config{Targets: func() []expire.Target {
		all := reg.All()
		out := make([]expire.Target, len(all))
		for i, n := range all {
			out[i] = n.DB
		}
		return out
	}, OnCycle: cfg.OnExpireCycle})

	if syncer != nil {
		checks.Add("cluster-topology", func(context.Context) error {
			st := syncer.Status()
			if !st.Stale {
				return nil
			}
			return fmt.Errorf("topology store unreachable for %s; serving epoch %d (revision %d): %s",
				time.Since(st.LastContact).Round(time.Second), st.Epoch, st.Revision, st.Err)
		})
	}

	serving = true
	// The services stop when svc ends: after a handover, when ctx ends.
	svc, stopSvc := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSvc()
	g, gctx := errgroup.WithContext(svc)
	g.Go(func() error {
		select {
		case <-gctx.Done(): // a service failed
			return nil
		case <-ctx.Done():
		}
		if syncer != nil && cfg.HandoverOnShutdown {
			handover(clusterState, syncer.Client, reshard.RESP{TLS: nodeTLS}, cfg.NodeID, feed, primary, &handingOver, log)
		}
		stopSvc()
		return nil
	})
	g.Go(func() error { return srv.Serve(gctx, respLis) })
	httpOwned = true
	g.Go(func() error {
		select {
		case err := <-httpDone: // the HTTP server failed on its own
			return err
		case <-gctx.Done():
			stopHTTP()
			return <-httpDone
		}
	})
	g.Go(func() error { return cycler.Run(gctx) })
	if watcher != nil {
		g.Go(func() error { return watcher.Run(gctx) })
	}
	if clusterWatcher != nil {
		g.Go(func() error { return clusterWatcher.Run(gctx) })
	}
	if syncer != nil {
		g.Go(func() error { return syncer.Run(gctx) })
	}
	if busSrv != nil {
		g.Go(func() error { return busSrv.Serve(gctx, busLis) })
		g.Go(func() error {
			defer sender.Close()
			return mover.Run(gctx)
		})
		g.Go(func() error { return followRole(gctx, clusterState, feed, primary, follower, &loading, log) })
	}
	if monitor != nil {
		g.Go(func() error { return monitor.Run(gctx) })
	}
	up.Store(true)
	log.Info("cachenode serving", "node", cfg.NodeID, "resp", respLis.Addr().String(), "tls", files != nil, "http", httpLis.Addr().String(),
		"maxmemory", strconv.FormatInt(cfg.MaxMemory, 10), "requireAuth", cfg.RequireAuth, "namespaces", len(reg.All()),
		"cluster", clusterState != nil)
	if cfg.Ready != nil {
		a := Addrs{RESP: respLis.Addr().String(), HTTP: httpLis.Addr().String()}
		if busLis != nil {
			a.Bus = busLis.Addr().String()
		}
		cfg.Ready <- a
	}
	err = g.Wait()
	up.Store(false)
	return err
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
