package kvnode

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/portico-io/portico/kvnode/antientropy"
	"github.com/portico-io/portico/kvnode/internode"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// How this node reaches the replicas of a key, itself included (the
// coordinator's, hints' and anti-entropy's view of the cluster), and how
// it serves other nodes' calls.

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
	return s.n.moves.HandleGossip(req), nil
}

func (s server) Tree(_ context.Context, req *kvv1.TreeRequest) (*kvv1.TreeResponse, error) {
	return antientropy.ServeTree(s.n.st, req)
}

func (s server) Scan(_ context.Context, req *kvv1.ScanRequest) (*kvv1.ScanResponse, error) {
	return antientropy.ServeScan(s.n.st, req)
}

func (s server) Rebalance(ctx context.Context, _ *kvv1.RebalanceRequest) (*kvv1.RebalanceResponse, error) {
	return s.n.moves.HandleRebalance(ctx)
}
