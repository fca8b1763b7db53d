package cachenode

// The parts of a cluster node: its slot map (from a file or the topology
// store), the bus and what it serves, failover and the handover on
// shutdown.

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/portico-io/portico/cachenode/bus"
	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/failover"
	"github.com/portico-io/portico/cachenode/migrate"
	"github.com/portico-io/portico/cachenode/namespace"
	"github.com/portico-io/portico/cachenode/repl"
	"github.com/portico-io/portico/cachenode/reshard"
	"github.com/portico-io/portico/cachenode/topology"
	"github.com/portico-io/portico/internal/health"
)

// loadClusterFile loads the slot map in cfg.ClusterConfig; the watcher
// re-reads it.
func loadClusterFile(cfg *Config) (*cluster.Watcher, *cluster.State, error) {
	w := &cluster.Watcher{Path: cfg.ClusterConfig, SelfID: cfg.NodeID, Interval: cfg.ReloadInterval,
		Logger: cfg.Logger, OnCheck: cfg.OnClusterReload}
	st, err := w.Load()
	if err != nil {
		return nil, nil, fmt.Errorf("cachenode: %w", err)
	}
	return w, st, nil
}

// loadTopology waits until the topology store holds a map listing this
// node, saying why in the "cluster-topology" check meanwhile; the syncer
// follows the map. It returns errStopped when ctx ends first.
func loadTopology(ctx context.Context, cfg *Config, c *certs, checks *health.Checks) (*topology.Syncer, *cluster.State, error) {
	s := &topology.Syncer{Client: &topology.Client{Addrs: cfg.ClusterKVAddrs, Cluster: cfg.ClusterName, Keyspace: cfg.ClusterKVKeyspace, TLS: c.kvClient()},
		SelfID: cfg.NodeID, CheckInterval: cfg.ClusterTopologyCheck, Logger: cfg.Logger, OnApply: cfg.OnTopologyApply}
	if err := s.Client.Validate(); err != nil {
		return nil, nil, fmt.Errorf("cachenode: %w", err)
	}
	checks.Add("cluster-topology", func(context.Context) error {
		return fmt.Errorf("waiting for a slot map listing node %s (cluster %s): %s", cfg.NodeID, cfg.ClusterName, s.Status().Err)
	})
	st, err := s.Load(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, errStopped
		}
		return nil, nil, fmt.Errorf("cachenode: %w", err)
	}
	cfg.Logger.Info("cluster topology loaded", "cluster", cfg.ClusterName, "epoch", st.Load().Epoch, "revision", s.Status().Revision)
	return s, st, nil
}

// topologyFresh is the "cluster-topology" check of a serving node: it
// fails while the store has been unreachable for too long.
func topologyFresh(s *topology.Syncer) health.Check {
	return func(context.Context) error {
		st := s.Status()
		if !st.Stale {
			return nil
		}
		return fmt.Errorf("topology store unreachable for %s; serving epoch %d (revision %d): %s",
			time.Since(st.LastContact).Round(time.Second), st.Epoch, st.Revision, st.Err)
	}
}

// busPart is the node-to-node port: slot imports and replication.
type busPart struct {
	lis  net.Listener
	srv  *bus.Server
	peer bus.Peer // how this node calls other nodes' bus ports
}

// listenBus listens on cfg.BusAddr, by default this node's bus port in the
// map; with certificates only cachenode identities are admitted.
func listenBus(ctx context.Context, cfg *Config, st *cluster.State, c *certs) (*busPart, error) {
	addr := cfg.BusAddr
	if addr == "" {
		addr = ":" + strconv.Itoa(st.Load().Myself().BusPort)
	}
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cachenode: listen %s (bus): %w", addr, err)
	}
	return &busPart{lis: c.serveBus(lis), srv: &bus.Server{Secret: cfg.ClusterSecret, Logger: cfg.Logger},
		peer: bus.Peer{Secret: cfg.ClusterSecret, TLS: c.nodeClient()}}, nil
}

func (b *busPart) run(ctx context.Context) error { return b.srv.Serve(ctx, b.lis) }
func (b *busPart) close()                        { b.lis.Close() }

// migration imports slots into this node over the bus, and copies out
// the slots it migrates.
type migration struct {
	mover  *migrate.Mover
	sender *migrate.BusSender
}

// newMigration registers the import command on b; stored is called for
// every imported key.
func newMigration(cfg *Config, st *cluster.State, reg *namespace.Registry, b *busPart, stored func(string, []byte)) (*migration, error) {
	b.srv.Handle(migrate.ImportCommand, migrate.ImportHandler(st, reg, stored))
	sender := &migrate.BusSender{Bus: b.peer}
	mover, err := migrate.New(migrate.Config{State: st, Registry: reg, Send: sender.Send,
		KeysPerSecond: cfg.MigrateKeysPerSecond, Logger: cfg.Logger, Registerer: cfg.Registry})
	if err != nil {
		return nil, fmt.Errorf("cachenode: %w", err)
	}
	return &migration{mover: mover, sender: sender}, nil
}

func (m *migration) run(ctx context.Context) error {
	defer m.sender.Close()
	return m.mover.Run(ctx)
}

func (m *migration) close() {}

// replication serves this node's feed to its replicas over the bus and,
// while the map makes it a replica, follows its primary.
type replication struct {
	feed     *repl.Feed
	primary  *repl.Primary
	follower *repl.Follower
	roles    *repl.Roles
}

// newReplication registers SYNC on b; stored is called for every
// replicated key, loading is kept true during a full sync.
func newReplication(cfg *Config, st *cluster.State, reg *namespace.Registry, feed *repl.Feed, b *busPart, port int,
	loading *atomic.Bool, stored func(string, []byte)) (*replication, error) {
	rm, err := repl.NewMetrics(cfg.Registry, feed)
	if err != nil {
		return nil, fmt.Errorf("cachenode: metrics: %w", err)
	}
	p := repl.NewPrimary(repl.PrimaryConfig{Feed: feed, Registry: reg, Logger: cfg.Logger, Metrics: rm,
		Serving: func() bool { return !st.Load().Myself().IsReplica() }})
	p.Register(b.srv)
	// Acks every 100 ms: what a primary handing over waits for.
	f := repl.NewFollower(repl.FollowerConfig{Registry: reg, Bus: b.peer, Logger: cfg.Logger, Metrics: rm, AckInterval: 100 * time.Millisecond,
		Stored: stored, Announce: net.JoinHostPort(st.Load().Myself().Host, strconv.Itoa(port))})
	return &replication{feed: feed, primary: p, follower: f,
		roles: &repl.Roles{Map: st, Feed: feed, Primary: p, Follower: f, Loading: loading, Logger: cfg.Logger}}, nil
}

func (r *replication) run(ctx context.Context) error { return r.roles.Run(ctx) }
func (r *replication) close()                        {}

// info is INFO's replication section.
func (r *replication) info() string { return repl.Info(r.feed, r.primary, r.follower) }

// position is the replication offset: a replica's applied one (and
// whether it is in a full sync), else this node's feed's.
func (r *replication) position() (int64, bool) {
	if st := r.follower.Status(); st.Primary != "" {
		return st.Offset, st.Syncing
	}
	return r.feed.Offset(), false
}

func (r *replication) offset() int64 {
	o, _ := r.position()
	return o
}

// newMonitor builds the failover monitor and waits up to 5 s for the store
// to confirm this node's role: a primary takes writes only once it has.
func newMonitor(ctx context.Context, cfg *Config, s *topology.Syncer, st *cluster.State, c *certs, replOffset func() int64) (*failover.Monitor, error) {
	m, err := failover.New(failover.Config{Client: s.Client, State: st, SelfID: cfg.NodeID, TLS: c.nodeClient(),
		Interval: cfg.FailoverInterval, FailAfter: cfg.FailAfter, Lease: cfg.FailoverLease, PromotionHold: cfg.FailoverHold,
		ReplOffset: replOffset, Logger: cfg.Logger, Registerer: cfg.Registry})
	if err != nil {
		return nil, fmt.Errorf("cachenode: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := m.Confirm(cctx); err != nil {
		cfg.Logger.Warn("failover: the store did not confirm this node's role yet; writes wait for it", "err", err)
	}
	return m, nil
}

// newShutdownHandover hands this primary's slots to a caught-up replica
// when the node stops, holding keyed commands through hold meanwhile.
func newShutdownHandover(cfg *Config, s *topology.Syncer, st *cluster.State, c *certs, feed *repl.Feed, p *repl.Primary, hold *atomic.Bool) *failover.ShutdownHandover {
	return &failover.ShutdownHandover{
		Handover: failover.Handover{Client: s.Client, SelfID: cfg.NodeID, Offset: feed.Offset, Acked: p.Acked, Logger: cfg.Logger},
		State:    st, Nodes: reshard.RESP{TLS: c.nodeClient()}, Hold: hold}
}
