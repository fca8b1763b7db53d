package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/portico-io/portico/kvnode/ring"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// Defaults for ProtocolConfig.
const (
	DefaultFanout      = 3
	DefaultStartupWait = 5 * time.Second
)

// ProtocolConfig configures NewProtocol. The node id, address, rack,
// replication factor and gossip interval are the Membership's.
type ProtocolConfig struct {
	// Seeds are internode addresses gossiped with until they are members.
	Seeds []string
	// Vnodes is how many tokens this node takes (default ring.DefaultVnodes).
	Vnodes int
	// Fanout is how many random members each gossip round reaches
	// (default 3), seeds not yet known aside.
	Fanout int
	// AutoJoin lets a node without tokens found the ring with its seeds or
	// join the ring they serve, at start; otherwise it waits for Join or
	// Replace.
	AutoJoin bool
	// StartupWait bounds how long an auto-joining node waits to hear every
	// seed before it decides (default 5s).
	StartupWait time.Duration
	// Logger gets ring moves and persistence failures (default: discarded).
	Logger *slog.Logger
	// OnRingChange, when set, runs after a merged view changed the ring
	// and was persisted, before Merge returns. kvnode passes its write
	// barrier: it returns once every write placed under the old ring has
	// finished, so this node never acts on the new ring (e.g. streams a
	// range it gains) with such writes in flight.
	OnRingChange func()
	// Pause, when set, holds gossip rounds while the node is paused.
	Pause interface{ Wait(context.Context) error }
}

// Meta is the node's durable metadata (storage.Store): where the protocol
// keeps this node's tokens, state and last view across restarts.
type Meta interface {
	GetMeta(name string) ([]byte, error)
	PutMeta(name string, v []byte) error
}

// Transport reaches other nodes' internode endpoints (internode.Client).
type Transport interface {
	Gossip(ctx context.Context, addr string, req *kvv1.GossipRequest) (*kvv1.GossipResponse, error)
	Rebalance(ctx context.Context, addr string, req *kvv1.RebalanceRequest) (*kvv1.RebalanceResponse, error)
}

// Streamer moves ranges between replicas for a ring move (anti-entropy
// over the node's store).
type Streamer interface {
	// GCBefore is the tombstone purge horizon: older tombstones are not
	// streamed.
	GCBefore() time.Time
	// Pull streams range rg from replica src into the local store and
	// returns how many keys it wrote, also when it fails part way.
	Pull(ctx context.Context, src string, rg ring.Range, gc time.Time) (int, error)
	// RepairRanges compares ranges with peer by Merkle tree and exchanges
	// what differs, both ways.
	RepairRanges(ctx context.Context, ranges []ring.Range, peer string) (pulled, pushed int, err error)
}

// Protocol is one node's side of the membership protocol: gossip rounds,
// announcements that put a state change in effect on every live member,
// and the ring moves (found, join, decommission, replace) with their
// range streaming, each persisted in Meta so a restart resumes it. The
// view itself, and the rules for merging views, are Membership's.
//
// Protocol is safe for concurrent use; ring moves run one at a time.
type Protocol struct {
	cfg    ProtocolConfig
	mem    *Membership
	meta   Meta
	peers  Transport
	stream Streamer
	moveMu sync.Mutex // one ring move (or HoldMoves) at a time
}

// NewProtocol runs the protocol for the local node of mem. Call Restore
// before anything else, then run Gossip and TakePlace in the background.
func NewProtocol(cfg ProtocolConfig, mem *Membership, meta Meta, peers Transport, stream Streamer) *Protocol {
	if cfg.Vnodes <= 0 {
		cfg.Vnodes = ring.DefaultVnodes
	}
	if cfg.Fanout <= 0 {
		cfg.Fanout = DefaultFanout
	}
	if cfg.StartupWait <= 0 {
		cfg.StartupWait = DefaultStartupWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Protocol{cfg: cfg, mem: mem, meta: meta, peers: peers, stream: stream}
}

// HoldMoves keeps ring moves from starting (and waits for a running one)
// until release is called: for work that must see this node's ranges
// stay put, like cleanup.
func (p *Protocol) HoldMoves() (release func()) {
	p.moveMu.Lock()
	return p.moveMu.Unlock
}

// Merge folds a peer's view in (Membership.Merge); after a ring change it
// persists the view and runs OnRingChange.
func (p *Protocol) Merge(ms []*kvv1.Member) {
	if p.mem.Merge(ms) {
		p.savePeers()
		p.persistStandDown()
		if p.cfg.OnRingChange != nil {
			p.cfg.OnRingChange()
		}
	}
}

// HandleGossip answers a peer's gossip: its view merged in, ours back.
func (p *Protocol) HandleGossip(req *kvv1.GossipRequest) *kvv1.GossipResponse {
	p.Merge(req.Members)
	return &kvv1.GossipResponse{Members: p.mem.Snapshot()}
}

// HandleRebalance answers a decommissioning node: pull the ranges this
// node gains.
func (p *Protocol) HandleRebalance(ctx context.Context) (*kvv1.RebalanceResponse, error) {
	k, err := p.PullGained(ctx)
	if err != nil {
		return nil, err
	}
	return &kvv1.RebalanceResponse{Keys: uint64(k)}, nil
}

// Gossip runs a gossip round every interval until ctx ends: a heartbeat,
// then views exchanged with Fanout random members and every seed not yet
// known, concurrently.
func (p *Protocol) Gossip(ctx context.Context) {
	t := time.NewTicker(p.mem.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if p.cfg.Pause != nil {
			if err := p.cfg.Pause.Wait(ctx); err != nil {
				return
			}
		}
		p.mem.Beat()
		var wg sync.WaitGroup
		for _, addr := range p.gossipTargets() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.gossipWith(ctx, addr)
			}()
		}
		wg.Wait()
	}
}

func (p *Protocol) gossipTargets() []string {
	known := map[string]bool{}
	var peers []string
	for _, m := range p.mem.Snapshot() {
		known[m.Addr] = true
		if m.Id != p.mem.ID() && m.State != kvv1.MemberState_MEMBER_STATE_LEFT {
			peers = append(peers, m.Addr)
		}
	}
	rand.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] })
	peers = peers[:min(len(peers), p.cfg.Fanout)]
	for _, s := range p.cfg.Seeds {
		if !known[s] && s != p.mem.Self().Addr {
			peers = append(peers, s)
		}
	}
	return peers
}

func (p *Protocol) gossipWith(ctx context.Context, addr string) {
	ctx, cancel := context.WithTimeout(ctx, max(p.mem.cfg.Interval, 200*time.Millisecond))
	defer cancel()
	resp, err := p.peers.Gossip(ctx, addr, &kvv1.GossipRequest{From: p.mem.ID(), Members: p.mem.Snapshot()})
	if err != nil {
		return // the phi detector judges silence; nothing to log per round
	}
	p.Merge(resp.Members)
}

// announce pushes the local state to every member now, so a state change
// (and its write barrier) is in effect on every live node before the caller
// goes on.
func (p *Protocol) announce(ctx context.Context) error {
	var errs []error
	for _, m := range p.mem.Snapshot() {
		if m.Id == p.mem.ID() || m.State == kvv1.MemberState_MEMBER_STATE_LEFT || !p.mem.Alive(m.Id) {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := p.peers.Gossip(cctx, m.Addr, &kvv1.GossipRequest{From: p.mem.ID(), Members: p.mem.Snapshot()})
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("announce to %s: %w", m.Id, err))
			continue
		}
		p.Merge(resp.Members)
	}
	return errors.Join(errs...)
}
