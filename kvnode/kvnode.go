// Package kvnode is one node of Portico's Dynamo-style leaderless
// key-value store: pebble storage, a Murmur3 token ring with vnodes,
// per-request coordination at ONE/QUORUM/ALL with hinted handoff, digest
// reads with blocking read repair and speculative retry, gossip membership
// with phi-accrual failure detection, Merkle-tree anti-entropy, and join and
// decommission by range streaming with dual writes. Every node plays every
// role; there is no master.
package kvnode

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/portico-io/portico/internal/grpcserver"
	"github.com/portico-io/portico/internal/health"
	"github.com/portico-io/portico/internal/httpserver"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlsfiles"
	"github.com/portico-io/portico/kvnode/antientropy"
	"github.com/portico-io/portico/kvnode/api"
	"github.com/portico-io/portico/kvnode/coordinator"
	"github.com/portico-io/portico/kvnode/cp"
	"github.com/portico-io/portico/kvnode/hint"
	"github.com/portico-io/portico/kvnode/hlc"
	"github.com/portico-io/portico/kvnode/internode"
	"github.com/portico-io/portico/kvnode/membership"
	"github.com/portico-io/portico/kvnode/ring"
	"github.com/portico-io/portico/kvnode/storage"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// Node is one running kvnode. Create with New, then Start; Stop ends it.
type Node struct {
	cfg   Config
	st    *storage.Store
	clock *hlc.Clock
	mem   *membership.Membership
	// moves runs the membership protocol (gossip, join, decommission,
	// replace) over mem.
	moves  *membership.Protocol
	hints  *hint.Hints
	coord  *coordinator.Coordinator
	rep    *antientropy.Repairer
	client *internode.Client
	pause  internode.Pause
	// tls is the node's certificate, nil in plaintext mode.
	tls *tlsfiles.Files
	// cp is the consensus tier's group member, nil when not enabled.
	cp *cp.Group

	// gate is the ring-change barrier: writes hold it shared while they
	// place and replicate; a ring change takes it exclusively once
	// (membership.ProtocolConfig.OnRingChange), so every write placed under
	// the old ring has finished before a node acts on the new one (e.g.
	// starts streaming a range it gains).
	gate sync.RWMutex

	httpLis, grpcLis net.Listener
	cancel           context.CancelFunc
	wg               sync.WaitGroup
	stopOnce         sync.Once
}

// peerPolicy admits kvnode identities only, on the internode and Raft ports.
var peerPolicy = identity.Policy{Roles: []identity.Role{identity.KVNode}}

// New opens the node's storage and builds its parts; nothing listens yet.
func New(cfg Config) (*Node, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	st, err := storage.Open(cfg.DataDir, storage.Options{NoSync: cfg.NoSync})
	if err != nil {
		return nil, err
	}
	// Checkpoints a backup left behind when the process died mid-stream.
	_ = os.RemoveAll(filepath.Join(cfg.DataDir, backupTmpDir))
	n := &Node{cfg: cfg, st: st, clock: hlc.New(cfg.Now, cfg.MaxClockOffset)}
	cfg.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "portico_kvnode_hlc_refused_timestamps_total",
		Help: "Record timestamps refused for being further ahead of this node's clock than the maximum offset."},
		func() float64 { return float64(n.clock.Rejected()) }))
	var peerCreds credentials.TransportCredentials
	if cfg.TLS.IsSet() {
		tc := cfg.TLS
		tc.Registerer, tc.MetricPrefix, tc.Logger = cfg.Registry, "portico_kvnode", cfg.Logger
		if n.tls, err = tlsfiles.Load(tc); err != nil {
			_ = st.Close()
			return nil, fmt.Errorf("kvnode: %w", err)
		}
		peerCreds = credentials.NewTLS(n.tls.ClientConfig(peerPolicy))
	}
	n.client = internode.NewClient(peerCreds)
	n.hints, err = hint.New(st, hint.Config{Window: cfg.HintWindow, Interval: cfg.HintInterval, Now: cfg.Now, Logger: cfg.Logger, OnPass: cfg.OnHintPass})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	return n, nil
}

// Start listens on the HTTP and internode addresses, starts the background
// loops and takes (or resumes) the node's place in the ring. It returns once
// both servers are listening.
func (n *Node) Start(ctx context.Context) error {
	var err error
	var lc net.ListenConfig
	if n.grpcLis, err = lc.Listen(ctx, "tcp", n.cfg.GRPCAddr); err != nil {
		return fmt.Errorf("kvnode: listen internode: %w", err)
	}
	if n.httpLis, err = lc.Listen(ctx, "tcp", n.cfg.HTTPAddr); err != nil {
		_ = n.grpcLis.Close()
		return fmt.Errorf("kvnode: listen http: %w", err)
	}
	n.mem = membership.New(membership.Config{
		ID: n.cfg.NodeID, Addr: advertise(n.cfg.AdvertiseAddr, n.grpcLis.Addr()), Rack: n.cfg.Rack,
		// Failure detection runs on the real clock: Config.Now moves data time
		// (TTL, hints, grace) in tests without making every peer look silent.
		N: n.cfg.Replication, PhiThreshold: n.cfg.PhiThreshold, Interval: n.cfg.GossipInterval,
	})
	n.moves = membership.NewProtocol(membership.ProtocolConfig{
		Seeds: n.cfg.Seeds, Vnodes: n.cfg.Vnodes, Fanout: n.cfg.GossipFanout, AutoJoin: n.cfg.JoinMode == JoinAuto,
		StartupWait: n.cfg.StartupWait, Logger: n.cfg.Logger, OnRingChange: n.ringBarrier, Pause: &n.pause,
	}, n.mem, n.st, n.client, streamer{n})
	if err := n.moves.Restore(); err != nil {
		_ = n.grpcLis.Close()
		_ = n.httpLis.Close()
		return err
	}
	ctx, n.cancel = context.WithCancel(ctx)
	n.coord, err = coordinator.New(ctx, coordinator.Config{
		NodeID: n.cfg.NodeID, WriteTimeout: n.cfg.WriteTimeout, ReadTimeout: n.cfg.ReadTimeout,
		VClockKeyspaces: n.cfg.VClockKeyspaces, Clock: n.clock, Now: n.cfg.Now, Logger: n.cfg.Logger,
		Registerer: n.cfg.Registry,
	}, n, n, n.hints)
	if err != nil {
		return err
	}
	n.rep = antientropy.New(antientropy.Config{
		Self: n.cfg.NodeID, Depth: n.cfg.RepairDepth, Interval: n.cfg.RepairInterval, Grace: n.cfg.TombstoneGrace,
		Now: n.cfg.Now, Logger: n.cfg.Logger, OnPass: n.cfg.OnRepairPass,
	}, n.st, n, n.mem)
	n.registerMetrics()

	gsOpts := []grpc.ServerOption{grpc.UnaryInterceptor(n.pause.Interceptor()), grpc.MaxRecvMsgSize(64 << 20), grpc.MaxSendMsgSize(64 << 20)}
	if n.tls != nil {
		// Only other kvnodes may call Apply, Gossip, Scan, Rebalance …
		gsOpts = append(gsOpts, grpc.Creds(credentials.NewTLS(n.tls.ServerConfig(peerPolicy))))
		n.goLoop(func() { _ = n.tls.Run(ctx) })
	}
	gs := grpcserver.New(gsOpts...)
	internode.Register(gs.Server, server{n})
	checks := health.New()
	checks.Add("ring", func(context.Context) error {
		if self := n.mem.Self(); self.State != kvv1.MemberState_MEMBER_STATE_NORMAL {
			return fmt.Errorf("node is %s", self.State)
		}
		return nil
	})
	var cpEngine api.CPEngine
	if n.cfg.CP.BindAddr != "" {
		c := n.cfg.CP
		c.NodeID = n.cfg.NodeID
		if c.DataDir == "" {
			c.DataDir = filepath.Join(n.cfg.DataDir, "raft")
		}
		if c.HTTPAddr == "" {
			c.HTTPAddr = advertise("", n.httpLis.Addr())
		}
		if c.Logger == nil {
			c.Logger = n.cfg.Logger
		}
		c.NoSync = c.NoSync || n.cfg.NoSync
		if n.tls != nil && c.TLS == nil {
			c.TLS = n.tls
		}
		if n.cp, err = cp.Open(ctx, c); err != nil {
			n.cancel()
			_ = n.grpcLis.Close()
			_ = n.httpLis.Close()
			return err
		}
		if err = n.cfg.Registry.Register(n.cp.Collector()); err != nil {
			n.cancel()
			_ = n.cp.Close()
			_ = n.grpcLis.Close()
			_ = n.httpLis.Close()
			return fmt.Errorf("kvnode: cp metrics: %w", err)
		}
		cpEngine = n.cp
	}
	advertisedHTTP := n.cfg.CP.HTTPAddr
	if advertisedHTTP == "" {
		advertisedHTTP = advertise("", n.httpLis.Addr())
	}
	apiCfg, err := n.apiConfig(cpEngine, advertisedHTTP)
	var handler *api.API
	if err == nil {
		handler, err = api.New(apiCfg)
	}
	if err != nil {
		n.cancel()
		if n.cp != nil {
			_ = n.cp.Close()
		}
		_ = n.grpcLis.Close()
		_ = n.httpLis.Close()
		return err
	}
	n.goLoop(func() {
		if err := gs.Serve(ctx, n.grpcLis, 2*time.Second); err != nil {
			n.cfg.Logger.Error("kvnode: internode server", "err", err)
		}
	})
	n.goLoop(func() {
		err := httpserver.Serve(ctx, n.httpLis, httpserver.Config{
			Handler: n.pauseHTTP(handler), Gatherer: n.cfg.Registry, Health: checks, TLS: n.apiTLS(), Logger: n.cfg.Logger, ShutdownTimeout: 2 * time.Second,
		})
		if err != nil {
			n.cfg.Logger.Error("kvnode: http server", "err", err)
		}
	})
	n.goLoop(func() { n.moves.Gossip(ctx) })
	n.goLoop(func() { n.hints.Run(ctx, n, n) })
	n.goLoop(func() { n.rep.Run(ctx) })
	n.goLoop(func() { n.moves.TakePlace(ctx) })
	n.cfg.Logger.Info("kvnode: started", "node", n.cfg.NodeID, "http", n.httpLis.Addr().String(), "internode", n.mem.Self().Addr)
	return nil
}

func (n *Node) goLoop(fn func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		fn()
	}()
}

// Stop ends the loops and servers and closes storage. Safe to call twice.
func (n *Node) Stop() error {
	var err error
	n.stopOnce.Do(func() {
		n.pause.Set(false)
		if n.cancel != nil {
			n.cancel()
		}
		if n.cp != nil {
			// Before the HTTP server drains: requests waiting on Raft end
			// at once (503/504) instead of running out their timeouts.
			if e := n.cp.Close(); e != nil {
				err = e
			}
		}
		n.wg.Wait()
		n.client.Close()
		if e := n.st.Close(); e != nil {
			err = e
		}
	})
	return err
}

// Run starts a node and serves until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	n, err := New(cfg)
	if err != nil {
		return err
	}
	if err := n.Start(ctx); err != nil {
		_ = n.Stop()
		return err
	}
	<-ctx.Done()
	return n.Stop()
}

// ID is the node id.
func (n *Node) ID() string { return n.cfg.NodeID }

// HTTPAddr is the bound HTTP address.
func (n *Node) HTTPAddr() string { return n.httpLis.Addr().String() }

// GRPCAddr is the bound internode address.
func (n *Node) GRPCAddr() string { return n.grpcLis.Addr().String() }

// Pause makes the node stop responding (internode calls and HTTP requests
// block, gossip and hint replay stop) until Pause(false): a stalled
// process, for fault drills.
func (n *Node) Pause(p bool) { n.pause.Set(p) }

// CP exposes the consensus tier's group member (nil when not enabled).
func (n *Node) CP() *cp.Group { return n.cp }

// Membership exposes the node's view of the cluster.
func (n *Node) Membership() *membership.Membership { return n.mem }

// Store exposes the local replica.
func (n *Node) Store() *storage.Store { return n.st }

// Hints exposes the hint store.
func (n *Node) Hints() *hint.Hints { return n.hints }

// Coordinator exposes the request coordinator.
func (n *Node) Coordinator() *coordinator.Coordinator { return n.coord }

// Repairer exposes anti-entropy.
func (n *Node) Repairer() *antientropy.Repairer { return n.rep }

func (n *Node) pauseHTTP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := n.pause.Wait(r.Context()); err != nil {
			return
		}
		h.ServeHTTP(w, r)
	})
}

// --- ring moves (membership.Protocol) ---

var _ membership.Transport = (*internode.Client)(nil)

// ringBarrier waits for the writes placed under the old ring (the barrier
// described on gate).
func (n *Node) ringBarrier() {
	n.gate.Lock()
	n.gate.Unlock() //nolint:staticcheck // barrier: wait for in-flight writes
}

// Join implements api.Admin (membership.Protocol.Join).
func (n *Node) Join(ctx context.Context) error { return n.moves.Join(ctx) }

// Decommission implements api.Admin (membership.Protocol.Decommission).
func (n *Node) Decommission(ctx context.Context) error { return n.moves.Decommission(ctx) }

// streamer is membership.Streamer over anti-entropy and the local store.
type streamer struct{ n *Node }

func (s streamer) GCBefore() time.Time { return s.n.rep.GCBefore() }

func (s streamer) Pull(ctx context.Context, src string, rg ring.Range, gc time.Time) (int, error) {
	keys := 0
	err := antientropy.Pull(ctx, s.n, src, rg, gc, func(e *kvv1.Entry) error {
		keys++
		_, err := s.n.st.Apply(e.Key, e.GetSiblings().GetRecords())
		return err
	})
	return keys, err
}

func (s streamer) RepairRanges(ctx context.Context, ranges []ring.Range, peer string) (pulled, pushed int, err error) {
	return s.n.rep.RepairRanges(ctx, ranges, peer)
}
