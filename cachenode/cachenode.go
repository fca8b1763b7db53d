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
// kvnode's consensus tier instead of a file (package topology); slots move
// between nodes live (migrate, reshard), a replica follows its primary's
// stream (repl), and the nodes' monitors promote a replica by quorum when a
// primary fails (failover). Sorted sets, transactions, blocking commands
// and Lua scripts (package script) follow Redis's semantics.
//
// Run builds the parts the Config asks for (parts.go, clusterparts.go),
// runs them under one errgroup, and on shutdown (HandoverOnShutdown) hands
// a primary's slots to a replica before it stops.
package cachenode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/command"
	"github.com/portico-io/portico/cachenode/expire"
	"github.com/portico-io/portico/cachenode/failover"
	"github.com/portico-io/portico/cachenode/metrics"
	"github.com/portico-io/portico/cachenode/namespace"
	"github.com/portico-io/portico/cachenode/repl"
	"github.com/portico-io/portico/cachenode/samples"
	"github.com/portico-io/portico/cachenode/topology"
	"github.com/portico-io/portico/internal/health"
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
	// EventLoops is the number of event loops serving plaintext RESP
	// connections (server.Config.Loops): 0 = one per two Ps
	// (server.DefaultLoops), negative = a goroutine per connection.
	EventLoops int
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

// mode is how the node gets its slot map, if it has one.
type mode int

const (
	standalone   mode = iota
	clusterFile       // the map in the file ClusterConfig
	clusterStore      // the map in kvnode's consensus tier (ClusterKVAddrs)
)

func (c *Config) mode() mode {
	switch {
	case c.ClusterConfig != "":
		return clusterFile
	case len(c.ClusterKVAddrs) > 0 || c.ClusterName != "":
		return clusterStore
	}
	return standalone
}

func (c *Config) validate() error {
	if c.MaxMemory < 0 {
		return fmt.Errorf("cachenode: MaxMemory %d is negative", c.MaxMemory)
	}
	if c.ClusterConfig != "" && (len(c.ClusterKVAddrs) > 0 || c.ClusterName != "") {
		return errors.New("cachenode: a cluster config file and a topology store are exclusive")
	}
	return nil
}

// Run serves until ctx is done: it builds the parts of the node for its
// mode, runs them under one errgroup, and, when ctx is done, hands the
// node's slots over (HandoverOnShutdown) before stopping them.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	n := &node{cfg: cfg, log: cfg.Logger}
	defer n.close()
	switch err := n.build(ctx); {
	case errors.Is(err, errStopped):
		return nil
	case err != nil:
		return err
	}
	return n.serve(ctx)
}

// errStopped: ctx ended while the node waited for its slot map.
var errStopped = errors.New("cachenode: stopped before serving")

// node is one cache node: built by build, run by serve, released by close.
// Parts are what serve runs, in build order; the fields below them are the
// parts other parts are wired to, nil in the modes without them.
type node struct {
	cfg Config
	log *slog.Logger

	parts   []part
	certs   *certs // nil: plaintext
	checks  *health.Checks
	up      atomic.Bool // the RESP listener is serving
	loading atomic.Bool // a full sync is being applied
	hold    atomic.Bool // a handover holds keyed commands

	ring    *samples.Ring
	reg     *namespace.Registry
	http    *httpPart
	resp    *respPart
	metrics *metrics.Metrics
	eng     *command.Engine

	// Cluster mode.
	state   *cluster.State
	feed    *repl.Feed
	bus     *busPart
	migrate *migration
	repl    *replication
	// Topology-store mode.
	syncer  *topology.Syncer
	monitor *failover.Monitor
	exit    *failover.ShutdownHandover
}

func (n *node) add(p part) { n.parts = append(n.parts, p) }

// build assembles the parts for the node's mode. HTTP serves from the
// start: /healthz answers (and /readyz explains) while a node waits for
// its slot map, so an orchestrator does not restart a node that is only
// waiting.
func (n *node) build(ctx context.Context) error {
	cfg, mode := &n.cfg, n.cfg.mode()
	if mode != standalone {
		// Every change is logged for replicas from the start, so a replica
		// that connects later can continue from the backlog.
		n.feed = repl.NewFeed(repl.FeedConfig{BacklogBytes: cfg.ReplBacklogBytes})
	}
	n.ring, n.reg = newKeyspace(cfg, n.feed)
	if cfg.NamespacesFile != "" {
		w, err := loadNamespaces(cfg, n.reg)
		if err != nil {
			return err
		}
		n.add(task{w})
	}
	if mode == clusterFile {
		w, st, err := loadClusterFile(cfg)
		if err != nil {
			return err
		}
		n.state = st
		n.add(task{w})
	}
	var err error
	if n.certs, err = loadCerts(ctx, cfg); err != nil {
		return err
	}
	n.checks = newChecks(&n.up)
	if n.http, err = startHTTP(ctx, cfg, n.checks); err != nil {
		return err
	}
	n.add(n.http)
	if mode == clusterStore {
		if n.syncer, n.state, err = loadTopology(ctx, cfg, n.certs, n.checks); err != nil {
			return err
		}
		n.add(task{n.syncer})
	}
	if n.resp, err = listenRESP(ctx, cfg, n.certs, n.state); err != nil {
		return err
	}
	n.add(n.resp)
	if n.metrics, err = newMetrics(cfg, n.reg, n.resp.clients, n.state, n.syncer); err != nil {
		return err
	}
	if n.state != nil {
		if err := n.buildCluster(ctx); err != nil {
			return err
		}
	}
	if err := n.buildServer(); err != nil {
		return err
	}
	n.add(task{newCycler(cfg, n.reg)})
	if n.syncer != nil {
		n.checks.Add("cluster-topology", topologyFresh(n.syncer))
	}
	return nil
}

// buildCluster adds the bus and what it serves (slot imports, migrations,
// replication) and, with a topology store, failover and the handover on
// shutdown.
func (n *node) buildCluster(ctx context.Context) error {
	cfg := &n.cfg
	var err error
	if n.bus, err = listenBus(ctx, cfg, n.state, n.certs); err != nil {
		return err
	}
	n.add(n.bus)
	if n.migrate, err = newMigration(cfg, n.state, n.reg, n.bus, n.keyStored); err != nil {
		return err
	}
	n.add(n.migrate)
	if n.repl, err = newReplication(cfg, n.state, n.reg, n.feed, n.bus, n.resp.port, &n.loading, n.keyStored); err != nil {
		return err
	}
	n.add(n.repl)
	if n.syncer == nil {
		return nil
	}
	if cfg.Failover {
		if n.monitor, err = newMonitor(ctx, cfg, n.syncer, n.state, n.certs, n.repl.offset); err != nil {
			return err
		}
		n.add(task{n.monitor})
	}
	if cfg.HandoverOnShutdown {
		n.exit = newShutdownHandover(cfg, n.syncer, n.state, n.certs, n.feed, n.repl.primary, &n.hold)
	}
	return nil
}

// keyStored serves the clients blocked on a replicated or imported key.
// The bus and the follower, which call it, start after the engine is built.
func (n *node) keyStored(ns string, key []byte) { n.eng.KeyStored(ns, key) }

// serve runs the parts under one errgroup until one fails or ctx is done
// and the node has handed over.
func (n *node) serve(ctx context.Context) error {
	// The parts stop when svc ends: after a handover, when ctx ends.
	svc, stopSvc := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSvc()
	g, gctx := errgroup.WithContext(svc)
	g.Go(func() error {
		select {
		case <-gctx.Done(): // a part failed
			return nil
		case <-ctx.Done():
		}
		if n.exit != nil {
			n.exit.Run(context.WithoutCancel(ctx))
		}
		stopSvc()
		return nil
	})
	for _, p := range n.parts {
		g.Go(func() error { return p.run(gctx) })
	}
	n.up.Store(true)
	n.announce()
	err := g.Wait()
	n.up.Store(false)
	return err
}

// announce logs that the node serves and sends its addresses to cfg.Ready.
func (n *node) announce() {
	cfg := &n.cfg
	a := Addrs{RESP: n.resp.lis.Addr().String(), HTTP: n.http.lis.Addr().String()}
	if n.bus != nil {
		a.Bus = n.bus.lis.Addr().String()
	}
	n.log.Info("cachenode serving", "node", cfg.NodeID, "resp", a.RESP, "tls", n.certs != nil, "http", a.HTTP,
		"maxmemory", strconv.FormatInt(cfg.MaxMemory, 10), "requireAuth", cfg.RequireAuth, "namespaces", len(n.reg.All()),
		"cluster", n.state != nil)
	if cfg.Ready != nil {
		cfg.Ready <- a
	}
}

// close releases every part, last built first, then stops reloading the
// certificates; after serve it only closes what is already closed.
func (n *node) close() {
	for i := len(n.parts) - 1; i >= 0; i-- {
		n.parts[i].close()
	}
	n.certs.close()
}
