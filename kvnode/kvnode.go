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
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

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
	cfg    Config
	st     *storage.Store
	clock  *hlc.Clock
	mem    *membership.Membership
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
	// place and replicate; a ring change takes it exclusively once, so every
	// write placed under the old ring has finished before a node acts on the
	// new one (e.g. starts streaming a range it gains).
	gate   sync.RWMutex
	moveMu sync.Mutex // one join or decommission at a time

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
	if n.grpcLis, err = net.Listen("tcp", n.cfg.GRPCAddr); err != nil {
		return fmt.Errorf("kvnode: listen internode: %w", err)
	}
	if n.httpLis, err = net.Listen("tcp", n.cfg.HTTPAddr); err != nil {
		_ = n.grpcLis.Close()
		return fmt.Errorf("kvnode: listen http: %w", err)
	}
	n.mem = membership.New(membership.Config{
		ID: n.cfg.NodeID, Addr: advertise(n.cfg.AdvertiseAddr, n.grpcLis.Addr()), Rack: n.cfg.Rack,
		// Failure detection runs on the real clock: Config.Now moves data time
		// (TTL, hints, grace) in tests without making every peer look silent.
		N: n.cfg.Replication, PhiThreshold: n.cfg.PhiThreshold, Interval: n.cfg.GossipInterval,
	})
	if err := n.restoreSelf(); err != nil {
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
		if n.cp, err = cp.Open(c); err != nil {
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
	n.goLoop(func() { n.gossipLoop(ctx) })
	n.goLoop(func() { n.hints.Run(ctx, n, n) })
	n.goLoop(func() { n.rep.Run(ctx) })
	n.goLoop(func() { n.takePlace(ctx) })
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

// --- placement and transport (coordinator.Topology, coordinator.Transport) ---

// Placement implements coordinator.Topology.
func (n *Node) Placement(token uint64) (current, pending []string) {
	cur, fut := n.mem.Rings()
	current = cur.Preference(token)
	for _, id := range fut.Preference(token) {
		if !slices.Contains(current, id) {
			pending = append(pending, id)
		}
	}
	return current, pending
}

// Alive implements coordinator.Topology.
func (n *Node) Alive(id string) bool { return n.mem.Alive(id) }

// Left implements hint.Liveness: id left the ring (decommissioned or
// replaced), so hints for it are dropped.
func (n *Node) Left(id string) bool {
	m, ok := n.mem.Member(id)
	return ok && m.State == kvv1.MemberState_MEMBER_STATE_LEFT
}

// Apply implements coordinator.Transport and antientropy.Peers.
func (n *Node) Apply(ctx context.Context, node string, entries []*kvv1.Entry) error {
	if node == n.cfg.NodeID {
		return n.applyLocal(entries)
	}
	addr, ok := n.mem.Addr(node)
	if !ok {
		return fmt.Errorf("kvnode: unknown node %s", node)
	}
	_, err := n.client.Apply(ctx, addr, &kvv1.ApplyRequest{Entries: entries})
	return err
}

// ApplyDotted implements coordinator.Transport.
func (n *Node) ApplyDotted(ctx context.Context, node string, e *kvv1.Entry) (*kvv1.Entry, error) {
	if node == n.cfg.NodeID {
		return n.applyDottedLocal(e)
	}
	addr, ok := n.mem.Addr(node)
	if !ok {
		return nil, fmt.Errorf("kvnode: unknown node %s", node)
	}
	resp, err := n.client.Apply(ctx, addr, &kvv1.ApplyRequest{Entries: []*kvv1.Entry{e}, AssignDots: true})
	if err != nil {
		return nil, err
	}
	if len(resp.Merged) != 1 {
		return nil, fmt.Errorf("kvnode: %s returned %d merged entries", node, len(resp.Merged))
	}
	return resp.Merged[0], nil
}

// applyDottedLocal gives e's undotted records a dot of this node (the HLC
// timestamp: unique here and above every dot this node issued before),
// merges them and returns the resulting set. The store's per-key lock makes
// dot issue and merge one step.
func (n *Node) applyDottedLocal(e *kvv1.Entry) (*kvv1.Entry, error) {
	recs := make([]*kvv1.Record, 0, len(e.GetSiblings().GetRecords()))
	for _, r := range e.GetSiblings().GetRecords() {
		if err := n.clock.Observe(r.Timestamp); err != nil {
			return nil, n.refuse(e.Key, err)
		}
		if r.Dot == nil {
			r = proto.Clone(r).(*kvv1.Record)
			r.Dot = &kvv1.Dot{Node: n.cfg.NodeID, Counter: n.clock.Now()}
		}
		recs = append(recs, r)
	}
	merged, err := n.st.Apply(e.Key, recs)
	if err != nil {
		return nil, err
	}
	return &kvv1.Entry{Key: e.Key, Siblings: &kvv1.Siblings{Records: merged}}, nil
}

// SendHints implements hint.Sender.
func (n *Node) SendHints(ctx context.Context, target string, entries []*kvv1.Entry) error {
	return n.Apply(ctx, target, entries)
}

// Read implements coordinator.Transport.
func (n *Node) Read(ctx context.Context, node string, key []byte, digestOnly bool) (*kvv1.ReadResponse, error) {
	req := &kvv1.ReadRequest{Key: key, DigestOnly: digestOnly}
	if node == n.cfg.NodeID {
		return n.readLocal(req)
	}
	addr, ok := n.mem.Addr(node)
	if !ok {
		return nil, fmt.Errorf("kvnode: unknown node %s", node)
	}
	return n.client.Read(ctx, addr, req)
}

// Tree implements antientropy.Peers.
func (n *Node) Tree(ctx context.Context, node string, req *kvv1.TreeRequest) (*kvv1.TreeResponse, error) {
	addr, ok := n.mem.Addr(node)
	if !ok {
		return nil, fmt.Errorf("kvnode: unknown node %s", node)
	}
	return n.client.Tree(ctx, addr, req)
}

// Scan implements antientropy.Peers.
func (n *Node) Scan(ctx context.Context, node string, req *kvv1.ScanRequest) (*kvv1.ScanResponse, error) {
	addr, ok := n.mem.Addr(node)
	if !ok {
		return nil, fmt.Errorf("kvnode: unknown node %s", node)
	}
	return n.client.Scan(ctx, addr, req)
}

// applyLocal stores entries. An entry carrying a timestamp beyond the
// maximum clock offset is refused (and the others still applied): stored,
// it would win last-write-wins against every later write of the key.
func (n *Node) applyLocal(entries []*kvv1.Entry) error {
	var refused error
	for _, e := range entries {
		recs := e.GetSiblings().GetRecords()
		ok := true
		for _, r := range recs {
			if err := n.clock.Observe(r.Timestamp); err != nil {
				refused, ok = n.refuse(e.Key, err), false
				break
			}
		}
		if !ok {
			continue
		}
		if _, err := n.st.Apply(e.Key, recs); err != nil {
			return err
		}
	}
	return refused
}

// refuse logs a record refused for its timestamp and returns the error
// the sender gets.
func (n *Node) refuse(key []byte, err error) error {
	n.cfg.Logger.Warn("kvnode: refused a record stamped beyond the maximum clock offset", "key", string(key), "err", err)
	return status.Errorf(codes.FailedPrecondition, "kvnode: key %q: %v", key, err)
}

func (n *Node) readLocal(req *kvv1.ReadRequest) (*kvv1.ReadResponse, error) {
	recs, err := n.st.Get(req.Key)
	if err != nil {
		return nil, err
	}
	resp := &kvv1.ReadResponse{Found: len(recs) > 0, Digest: recordDigest(recs)}
	if !req.DigestOnly {
		resp.Siblings = &kvv1.Siblings{Records: recs}
	}
	return resp, nil
}

// --- internode server (internode.Handler) ---

type server struct{ n *Node }

var _ internode.Handler = server{}

func (s server) Apply(_ context.Context, req *kvv1.ApplyRequest) (*kvv1.ApplyResponse, error) {
	if req.AssignDots {
		resp := &kvv1.ApplyResponse{}
		for _, e := range req.Entries {
			m, err := s.n.applyDottedLocal(e)
			if err != nil {
				return nil, err
			}
			resp.Merged = append(resp.Merged, m)
		}
		return resp, nil
	}
	if err := s.n.applyLocal(req.Entries); err != nil {
		return nil, err
	}
	return &kvv1.ApplyResponse{}, nil
}

func (s server) Read(_ context.Context, req *kvv1.ReadRequest) (*kvv1.ReadResponse, error) {
	return s.n.readLocal(req)
}

func (s server) Gossip(_ context.Context, req *kvv1.GossipRequest) (*kvv1.GossipResponse, error) {
	s.n.merge(req.Members)
	return &kvv1.GossipResponse{Members: s.n.mem.Snapshot()}, nil
}

func (s server) Tree(_ context.Context, req *kvv1.TreeRequest) (*kvv1.TreeResponse, error) {
	return antientropy.ServeTree(s.n.st, req)
}

func (s server) Scan(_ context.Context, req *kvv1.ScanRequest) (*kvv1.ScanResponse, error) {
	return antientropy.ServeScan(s.n.st, req)
}

func (s server) Rebalance(ctx context.Context, _ *kvv1.RebalanceRequest) (*kvv1.RebalanceResponse, error) {
	k, err := s.n.pullGained(ctx)
	if err != nil {
		return nil, err
	}
	return &kvv1.RebalanceResponse{Keys: uint64(k)}, nil
}

// merge folds a peer's membership in; after a ring change it waits for the
// writes placed under the old ring (the barrier described on gate).
func (n *Node) merge(ms []*kvv1.Member) {
	if n.mem.Merge(ms) {
		n.savePeers()
		n.persistStandDown()
		n.gate.Lock()
		n.gate.Unlock() //nolint:staticcheck // barrier: wait for in-flight writes
	}
}

// persistStandDown records LEFT when gossip told this node it was
// replaced while it was down (membership stands it down), so a restart
// does not claim the tokens again.
func (n *Node) persistStandDown() {
	if n.mem.Self().State != kvv1.MemberState_MEMBER_STATE_LEFT {
		return
	}
	if sb, err := n.st.GetMeta(metaState); err == nil && len(sb) == 1 && kvv1.MemberState(sb[0]) != kvv1.MemberState_MEMBER_STATE_LEFT {
		n.cfg.Logger.Warn("kvnode: another node took this node's tokens while it was down (replaced); standing down")
		if err := n.st.PutMeta(metaState, []byte{byte(kvv1.MemberState_MEMBER_STATE_LEFT)}); err != nil {
			n.cfg.Logger.Error("kvnode: persisting the stand-down", "err", err)
		}
	}
}

// savePeers persists the membership view so a restarted node coordinates
// with the whole ring from its first request, not a ring of itself until
// gossip catches up (which would let it acknowledge a QUORUM write alone).
func (n *Node) savePeers() {
	b, err := proto.Marshal(&kvv1.GossipResponse{Members: n.mem.Snapshot()})
	if err == nil {
		err = n.st.PutMeta(metaPeers, b)
	}
	if err != nil {
		n.cfg.Logger.Error("kvnode: persisting membership", "err", err)
	}
}

// --- gossip ---

func (n *Node) gossipLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.GossipInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := n.pause.Wait(ctx); err != nil {
			return
		}
		n.mem.Beat()
		var wg sync.WaitGroup
		for _, addr := range n.gossipTargets() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n.gossipWith(ctx, addr)
			}()
		}
		wg.Wait()
	}
}

func (n *Node) gossipTargets() []string {
	known := map[string]bool{}
	var peers []string
	for _, m := range n.mem.Snapshot() {
		known[m.Addr] = true
		if m.Id != n.cfg.NodeID && m.State != kvv1.MemberState_MEMBER_STATE_LEFT {
			peers = append(peers, m.Addr)
		}
	}
	rand.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] })
	peers = peers[:min(len(peers), n.cfg.GossipFanout)]
	for _, s := range n.cfg.Seeds {
		if !known[s] && s != n.mem.Self().Addr {
			peers = append(peers, s)
		}
	}
	return peers
}

func (n *Node) gossipWith(ctx context.Context, addr string) {
	ctx, cancel := context.WithTimeout(ctx, max(n.cfg.GossipInterval, 200*time.Millisecond))
	defer cancel()
	resp, err := n.client.Gossip(ctx, addr, &kvv1.GossipRequest{From: n.cfg.NodeID, Members: n.mem.Snapshot()})
	if err != nil {
		return // the phi detector judges silence; nothing to log per round
	}
	n.merge(resp.Members)
}

// announce pushes the local state to every member now, so a state change
// (and its write barrier) is in effect on every live node before the caller
// goes on.
func (n *Node) announce(ctx context.Context) error {
	var errs []error
	for _, m := range n.mem.Snapshot() {
		if m.Id == n.cfg.NodeID || m.State == kvv1.MemberState_MEMBER_STATE_LEFT || !n.mem.Alive(m.Id) {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := n.client.Gossip(cctx, m.Addr, &kvv1.GossipRequest{From: n.cfg.NodeID, Members: n.mem.Snapshot()})
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("announce to %s: %w", m.Id, err))
			continue
		}
		n.merge(resp.Members)
	}
	return errors.Join(errs...)
}

// --- ring place: bootstrap, join, decommission ---

const (
	metaTokens = "tokens"
	metaState  = "state"
	metaPeers  = "peers"
	// metaReplacing names the dead node a JOINING node is replacing (empty
	// for a plain join), so a restart resumes the replacement.
	metaReplacing = "replacing"
)

func (n *Node) restoreSelf() error {
	pb, err := n.st.GetMeta(metaPeers)
	if err != nil {
		return err
	}
	if len(pb) > 0 {
		var peers kvv1.GossipResponse
		if err := proto.Unmarshal(pb, &peers); err != nil {
			return fmt.Errorf("kvnode: stored membership: %w", err)
		}
		n.mem.Merge(peers.Members)
	}
	tb, err := n.st.GetMeta(metaTokens)
	if err != nil {
		return err
	}
	sb, err := n.st.GetMeta(metaState)
	if err != nil {
		return err
	}
	if len(tb) == 0 || len(sb) != 1 {
		return nil
	}
	tokens := make([]uint64, len(tb)/8)
	for i := range tokens {
		tokens[i] = binary.BigEndian.Uint64(tb[8*i:])
	}
	n.mem.SetSelf(kvv1.MemberState(sb[0]), tokens)
	return nil
}

func encodeTokens(tokens []uint64) []byte {
	b := make([]byte, 0, 8*len(tokens))
	for _, t := range tokens {
		b = binary.BigEndian.AppendUint64(b, t)
	}
	return b
}

func (n *Node) persistSelf(state kvv1.MemberState, tokens []uint64) error {
	if tokens != nil {
		if err := n.st.PutMeta(metaTokens, encodeTokens(tokens)); err != nil {
			return err
		}
	}
	if err := n.st.PutMeta(metaState, []byte{byte(state)}); err != nil {
		return err
	}
	n.mem.SetSelf(state, tokens)
	n.savePeers()
	return nil
}

// takePlace runs at start: resume an interrupted join, or, for a node
// without tokens in auto mode, join the ring its seeds know or found one.
func (n *Node) takePlace(ctx context.Context) {
	self := n.mem.Self()
	switch self.State {
	case kvv1.MemberState_MEMBER_STATE_JOINING:
		if err := n.finishJoin(ctx); err != nil && ctx.Err() == nil {
			n.cfg.Logger.Error("kvnode: resuming join", "err", err)
		}
		return
	case kvv1.MemberState_MEMBER_STATE_PENDING:
	default:
		return
	}
	if n.cfg.JoinMode != JoinAuto {
		return
	}
	// Wait to hear every seed (bounded), then either found the ring with
	// the other seeds or join the ring they already serve.
	deadline := time.NewTimer(n.cfg.StartupWait)
	defer deadline.Stop()
wait:
	for !n.allSeedsKnown() {
		select {
		case <-ctx.Done():
			return
		case <-n.mem.Changed():
		case <-deadline.C:
			break wait
		}
	}
	if _, _, ok := n.founding(); ok {
		if err := n.bootstrap(); err != nil {
			n.cfg.Logger.Error("kvnode: bootstrap", "err", err)
		}
		return
	}
	if err := n.Join(ctx); err != nil && ctx.Err() == nil {
		n.cfg.Logger.Error("kvnode: auto join", "err", err)
	}
}

func (n *Node) allSeedsKnown() bool {
	known := map[string]bool{}
	for _, m := range n.mem.Snapshot() {
		known[m.Addr] = true
	}
	for _, s := range n.cfg.Seeds {
		if !known[s] {
			return false
		}
	}
	return true
}

// founding returns the founders (this node and its seeds, sorted by id)
// and this node's comb of tokens among them, and whether founding is right:
// every member that already has tokens is a co-founder holding exactly its
// comb slot. Nodes that start together with each other as seeds therefore
// agree on one evenly interleaved ring without coordination, whatever order
// they decide in; a node whose seeds serve some other ring joins it.
func (n *Node) founding() (founders []string, tokens []uint64, ok bool) {
	seeds := map[string]bool{n.mem.Self().Addr: true}
	for _, s := range n.cfg.Seeds {
		seeds[s] = true
	}
	members := n.mem.Snapshot()
	for _, m := range members {
		if seeds[m.Addr] && m.State != kvv1.MemberState_MEMBER_STATE_LEFT {
			founders = append(founders, m.Id)
		}
	}
	slices.Sort(founders)
	comb := func(id string) []uint64 {
		k, m := slices.Index(founders, id), len(founders)
		step := ^uint64(0) / uint64(m*n.cfg.Vnodes)
		out := make([]uint64, n.cfg.Vnodes)
		for j := range out {
			out[j] = uint64(j*m+k) * step
		}
		return out
	}
	for _, m := range members {
		if len(m.Tokens) == 0 || m.State == kvv1.MemberState_MEMBER_STATE_LEFT {
			continue
		}
		if !slices.Contains(founders, m.Id) || !slices.Equal(m.Tokens, comb(m.Id)) {
			return founders, nil, false
		}
	}
	return founders, comb(n.cfg.NodeID), true
}

// bootstrap founds (or co-founds) the ring with its comb of tokens.
func (n *Node) bootstrap() error {
	n.moveMu.Lock()
	defer n.moveMu.Unlock()
	if n.mem.Self().State != kvv1.MemberState_MEMBER_STATE_PENDING {
		return nil
	}
	founders, tokens, ok := n.founding()
	if !ok {
		return errors.New("kvnode: a ring other than ours appeared; join it instead")
	}
	n.cfg.Logger.Info("kvnode: founding ring", "founders", founders)
	return n.persistSelf(kvv1.MemberState_MEMBER_STATE_NORMAL, tokens)
}

// Join implements api.Admin: take tokens that balance the existing ring,
// stream the ranges they cover from their current replicas while
// coordinators dual-write to this node, then start serving them.
func (n *Node) Join(ctx context.Context) error {
	n.moveMu.Lock()
	switch n.mem.Self().State {
	case kvv1.MemberState_MEMBER_STATE_PENDING:
	case kvv1.MemberState_MEMBER_STATE_JOINING:
		// An earlier attempt stopped part way (a member did not answer the
		// announcement, or a stream failed): resume with the same tokens.
		n.moveMu.Unlock()
		return n.finishJoin(ctx)
	default:
		n.moveMu.Unlock()
		return fmt.Errorf("kvnode: node is already %s", n.mem.Self().State)
	}
	cur, _ := n.mem.Rings()
	if cur.Empty() {
		n.moveMu.Unlock()
		return errors.New("kvnode: no ring to join yet (no seed answered with members)")
	}
	self := n.mem.Self()
	tokens := ring.AllocateTokens(cur.Nodes(), ring.Node{ID: self.Id, Addr: self.Addr, Rack: self.Rack}, n.cfg.Vnodes, n.cfg.Replication)
	err := n.persistSelf(kvv1.MemberState_MEMBER_STATE_JOINING, tokens)
	n.moveMu.Unlock()
	if err != nil {
		return err
	}
	return n.finishJoin(ctx)
}

func (n *Node) finishJoin(ctx context.Context) error {
	if dead, err := n.st.GetMeta(metaReplacing); err != nil {
		return err
	} else if len(dead) > 0 {
		_, err := n.finishReplace(ctx, string(dead))
		return err
	}
	n.moveMu.Lock()
	defer n.moveMu.Unlock()
	if err := n.announce(ctx); err != nil {
		return err
	}
	keys, err := n.pullGained(ctx)
	if err != nil {
		return err
	}
	n.cfg.Logger.Info("kvnode: joined", "keys_streamed", keys)
	if err := n.persistSelf(kvv1.MemberState_MEMBER_STATE_NORMAL, nil); err != nil {
		return err
	}
	return n.announce(ctx)
}

// Decommission implements api.Admin: announce LEAVING (coordinators start
// dual-writing to the future owners), have every other node pull the
// ranges it gains, then leave the ring.
func (n *Node) Decommission(ctx context.Context) error {
	n.moveMu.Lock()
	defer n.moveMu.Unlock()
	switch n.mem.Self().State {
	case kvv1.MemberState_MEMBER_STATE_NORMAL, kvv1.MemberState_MEMBER_STATE_LEAVING:
	default:
		return fmt.Errorf("kvnode: cannot decommission a node that is %s", n.mem.Self().State)
	}
	if err := n.persistSelf(kvv1.MemberState_MEMBER_STATE_LEAVING, nil); err != nil {
		return err
	}
	if err := n.announce(ctx); err != nil {
		return err
	}
	for _, m := range n.mem.Snapshot() {
		if m.Id == n.cfg.NodeID || (m.State != kvv1.MemberState_MEMBER_STATE_NORMAL && m.State != kvv1.MemberState_MEMBER_STATE_JOINING) {
			continue
		}
		if !n.mem.Alive(m.Id) {
			return fmt.Errorf("kvnode: %s is down; it must be up to receive its share (retry when it is)", m.Id)
		}
		if _, err := n.client.Rebalance(ctx, m.Addr, &kvv1.RebalanceRequest{}); err != nil {
			return fmt.Errorf("kvnode: rebalance on %s: %w", m.Id, err)
		}
	}
	if err := n.persistSelf(kvv1.MemberState_MEMBER_STATE_LEFT, nil); err != nil {
		return err
	}
	return n.announce(ctx)
}

// pullGained streams in every range this node owns in the future ring but
// not in the current one, from all live current replicas of that range (so
// a write acknowledged by any quorum of them is included).
func (n *Node) pullGained(ctx context.Context) (int, error) {
	cur, fut := n.mem.Rings()
	if cur.Empty() {
		return 0, nil
	}
	var bounds []uint64
	for _, r := range []*ring.Ring{cur, fut} {
		for _, rg := range r.Ranges() {
			bounds = append(bounds, rg.End)
		}
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	gc := n.rep.GCBefore()
	keys := 0
	for i, end := range bounds {
		rg := ring.Range{Start: bounds[(i+len(bounds)-1)%len(bounds)], End: end}
		if !slices.Contains(fut.Preference(end), n.cfg.NodeID) || slices.Contains(cur.Preference(end), n.cfg.NodeID) {
			continue
		}
		for _, src := range cur.Preference(end) {
			if !n.mem.Alive(src) {
				continue
			}
			err := antientropy.Pull(ctx, n, src, rg, gc, func(e *kvv1.Entry) error {
				keys++
				_, err := n.st.Apply(e.Key, e.GetSiblings().GetRecords())
				return err
			})
			if err != nil {
				return keys, err
			}
		}
	}
	return keys, nil
}
