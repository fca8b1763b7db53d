package membership

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/portico-io/portico/kvnode/ring"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// Metadata names the protocol keeps in Meta.
const (
	metaTokens = "tokens"
	metaState  = "state"
	metaPeers  = "peers"
	// metaReplacing names the dead node a JOINING node is replacing (empty
	// for a plain join), so a restart resumes the replacement.
	metaReplacing = "replacing"
)

// Restore loads the view, tokens and state persisted by an earlier run
// into the Membership. Call it once, before the node serves.
func (p *Protocol) Restore() error {
	pb, err := p.meta.GetMeta(metaPeers)
	if err != nil {
		return err
	}
	if len(pb) > 0 {
		var peers kvv1.GossipResponse
		if err := proto.Unmarshal(pb, &peers); err != nil {
			return fmt.Errorf("kvnode: stored membership: %w", err)
		}
		p.mem.Merge(peers.Members)
	}
	tb, err := p.meta.GetMeta(metaTokens)
	if err != nil {
		return err
	}
	sb, err := p.meta.GetMeta(metaState)
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
	p.mem.SetSelf(kvv1.MemberState(sb[0]), tokens)
	return nil
}

// persistStandDown records LEFT when gossip told this node it was
// replaced while it was down (membership stands it down), so a restart
// does not claim the tokens again.
func (p *Protocol) persistStandDown() {
	if p.mem.Self().State != kvv1.MemberState_MEMBER_STATE_LEFT {
		return
	}
	if sb, err := p.meta.GetMeta(metaState); err == nil && len(sb) == 1 && kvv1.MemberState(sb[0]) != kvv1.MemberState_MEMBER_STATE_LEFT {
		p.cfg.Logger.Warn("kvnode: another node took this node's tokens while it was down (replaced); standing down")
		if err := p.meta.PutMeta(metaState, []byte{byte(kvv1.MemberState_MEMBER_STATE_LEFT)}); err != nil {
			p.cfg.Logger.Error("kvnode: persisting the stand-down", "err", err)
		}
	}
}

// savePeers persists the membership view so a restarted node coordinates
// with the whole ring from its first request, not a ring of itself until
// gossip catches up (which would let it acknowledge a QUORUM write alone).
func (p *Protocol) savePeers() {
	b, err := proto.Marshal(&kvv1.GossipResponse{Members: p.mem.Snapshot()})
	if err == nil {
		err = p.meta.PutMeta(metaPeers, b)
	}
	if err != nil {
		p.cfg.Logger.Error("kvnode: persisting membership", "err", err)
	}
}

func encodeTokens(tokens []uint64) []byte {
	b := make([]byte, 0, 8*len(tokens))
	for _, t := range tokens {
		b = binary.BigEndian.AppendUint64(b, t)
	}
	return b
}

// persistSelf stores, then takes, a new local state (and tokens, when not
// nil).
func (p *Protocol) persistSelf(state kvv1.MemberState, tokens []uint64) error {
	if tokens != nil {
		if err := p.meta.PutMeta(metaTokens, encodeTokens(tokens)); err != nil {
			return err
		}
	}
	if err := p.meta.PutMeta(metaState, []byte{byte(state)}); err != nil {
		return err
	}
	p.mem.SetSelf(state, tokens)
	p.savePeers()
	return nil
}

// TakePlace runs at start: resume an interrupted join, or, for a node
// without tokens in auto mode, join the ring its seeds know or found one.
func (p *Protocol) TakePlace(ctx context.Context) {
	self := p.mem.Self()
	switch self.State {
	case kvv1.MemberState_MEMBER_STATE_JOINING:
		if err := p.finishJoin(ctx); err != nil && ctx.Err() == nil {
			p.cfg.Logger.Error("kvnode: resuming join", "err", err)
		}
		return
	case kvv1.MemberState_MEMBER_STATE_PENDING:
	default:
		return
	}
	if !p.cfg.AutoJoin {
		return
	}
	// Wait to hear every seed (bounded), then either found the ring with
	// the other seeds or join the ring they already serve.
	deadline := time.NewTimer(p.cfg.StartupWait)
	defer deadline.Stop()
wait:
	for !p.allSeedsKnown() {
		select {
		case <-ctx.Done():
			return
		case <-p.mem.Changed():
		case <-deadline.C:
			break wait
		}
	}
	if _, _, ok := p.founding(); ok {
		if err := p.bootstrap(); err != nil {
			p.cfg.Logger.Error("kvnode: bootstrap", "err", err)
		}
		return
	}
	if err := p.Join(ctx); err != nil && ctx.Err() == nil {
		p.cfg.Logger.Error("kvnode: auto join", "err", err)
	}
}

func (p *Protocol) allSeedsKnown() bool {
	known := map[string]bool{}
	for _, m := range p.mem.Snapshot() {
		known[m.Addr] = true
	}
	for _, s := range p.cfg.Seeds {
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
func (p *Protocol) founding() (founders []string, tokens []uint64, ok bool) {
	seeds := map[string]bool{p.mem.Self().Addr: true}
	for _, s := range p.cfg.Seeds {
		seeds[s] = true
	}
	members := p.mem.Snapshot()
	for _, m := range members {
		if seeds[m.Addr] && m.State != kvv1.MemberState_MEMBER_STATE_LEFT {
			founders = append(founders, m.Id)
		}
	}
	slices.Sort(founders)
	comb := func(id string) []uint64 {
		k, m := slices.Index(founders, id), len(founders)
		step := ^uint64(0) / uint64(m*p.cfg.Vnodes)
		out := make([]uint64, p.cfg.Vnodes)
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
	return founders, comb(p.mem.ID()), true
}

// bootstrap founds (or co-founds) the ring with its comb of tokens.
func (p *Protocol) bootstrap() error {
	p.moveMu.Lock()
	defer p.moveMu.Unlock()
	if p.mem.Self().State != kvv1.MemberState_MEMBER_STATE_PENDING {
		return nil
	}
	founders, tokens, ok := p.founding()
	if !ok {
		return errors.New("kvnode: a ring other than ours appeared; join it instead")
	}
	p.cfg.Logger.Info("kvnode: founding ring", "founders", founders)
	return p.persistSelf(kvv1.MemberState_MEMBER_STATE_NORMAL, tokens)
}

// Join takes tokens that balance the existing ring, streams the ranges
// they cover from their current replicas while coordinators dual-write to
// this node, then starts serving them. A join that stopped part way
// resumes with the same tokens.
func (p *Protocol) Join(ctx context.Context) error {
	p.moveMu.Lock()
	switch p.mem.Self().State {
	case kvv1.MemberState_MEMBER_STATE_PENDING:
	case kvv1.MemberState_MEMBER_STATE_JOINING:
		// An earlier attempt stopped part way (a member did not answer the
		// announcement, or a stream failed): resume with the same tokens.
		p.moveMu.Unlock()
		return p.finishJoin(ctx)
	default:
		p.moveMu.Unlock()
		return fmt.Errorf("kvnode: node is already %s", p.mem.Self().State)
	}
	cur, _ := p.mem.Rings()
	if cur.Empty() {
		p.moveMu.Unlock()
		return errors.New("kvnode: no ring to join yet (no seed answered with members)")
	}
	self := p.mem.Self()
	tokens := ring.AllocateTokens(cur.Nodes(), ring.Node{ID: self.Id, Addr: self.Addr, Rack: self.Rack}, p.cfg.Vnodes, p.mem.cfg.N)
	err := p.persistSelf(kvv1.MemberState_MEMBER_STATE_JOINING, tokens)
	p.moveMu.Unlock()
	if err != nil {
		return err
	}
	return p.finishJoin(ctx)
}

func (p *Protocol) finishJoin(ctx context.Context) error {
	if dead, err := p.meta.GetMeta(metaReplacing); err != nil {
		return err
	} else if len(dead) > 0 {
		_, err := p.finishReplace(ctx, string(dead))
		return err
	}
	p.moveMu.Lock()
	defer p.moveMu.Unlock()
	if err := p.announce(ctx); err != nil {
		return err
	}
	keys, err := p.PullGained(ctx)
	if err != nil {
		return err
	}
	p.cfg.Logger.Info("kvnode: joined", "keys_streamed", keys)
	if err := p.persistSelf(kvv1.MemberState_MEMBER_STATE_NORMAL, nil); err != nil {
		return err
	}
	return p.announce(ctx)
}

// Decommission announces LEAVING (coordinators start dual-writing to the
// future owners), has every other node pull the ranges it gains, then
// leaves the ring.
func (p *Protocol) Decommission(ctx context.Context) error {
	p.moveMu.Lock()
	defer p.moveMu.Unlock()
	switch p.mem.Self().State {
	case kvv1.MemberState_MEMBER_STATE_NORMAL, kvv1.MemberState_MEMBER_STATE_LEAVING:
	default:
		return fmt.Errorf("kvnode: cannot decommission a node that is %s", p.mem.Self().State)
	}
	if err := p.persistSelf(kvv1.MemberState_MEMBER_STATE_LEAVING, nil); err != nil {
		return err
	}
	if err := p.announce(ctx); err != nil {
		return err
	}
	for _, m := range p.mem.Snapshot() {
		if m.Id == p.mem.ID() || (m.State != kvv1.MemberState_MEMBER_STATE_NORMAL && m.State != kvv1.MemberState_MEMBER_STATE_JOINING) {
			continue
		}
		if !p.mem.Alive(m.Id) {
			return fmt.Errorf("kvnode: %s is down; it must be up to receive its share (retry when it is)", m.Id)
		}
		if _, err := p.peers.Rebalance(ctx, m.Addr, &kvv1.RebalanceRequest{}); err != nil {
			return fmt.Errorf("kvnode: rebalance on %s: %w", m.Id, err)
		}
	}
	if err := p.persistSelf(kvv1.MemberState_MEMBER_STATE_LEFT, nil); err != nil {
		return err
	}
	return p.announce(ctx)
}

// PullGained streams in every range this node owns in the future ring but
// not in the current one, from all live current replicas of that range (so
// a write acknowledged by any quorum of them is included). It returns the
// keys streamed, also when it fails part way.
func (p *Protocol) PullGained(ctx context.Context) (int, error) {
	cur, fut := p.mem.Rings()
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
	gc := p.stream.GCBefore()
	self := p.mem.ID()
	keys := 0
	for i, end := range bounds {
		rg := ring.Range{Start: bounds[(i+len(bounds)-1)%len(bounds)], End: end}
		if !slices.Contains(fut.Preference(end), self) || slices.Contains(cur.Preference(end), self) {
			continue
		}
		for _, src := range cur.Preference(end) {
			if !p.mem.Alive(src) {
				continue
			}
			k, err := p.stream.Pull(ctx, src, rg, gc)
			keys += k
			if err != nil {
				return keys, err
			}
		}
	}
	return keys, nil
}

// Moving reports whether a join, leave or replacement is in progress: the
// pending ring's ranges differ from the current ring's.
func Moving(current, future *ring.Ring) bool {
	a, b := current.Ranges(), future.Ranges()
	return len(a) != len(b) || !sameRanges(a, b)
}

func sameRanges(a, b []ring.Range) bool {
	for i := range a {
		if a[i].Start != b[i].Start || a[i].End != b[i].End || len(a[i].Replicas) != len(b[i].Replicas) {
			return false
		}
		for j := range a[i].Replicas {
			if a[i].Replicas[j] != b[i].Replicas[j] {
				return false
			}
		}
	}
	return true
}

// StateName is the name of s in the admin API ("NORMAL", "JOINING" …).
func StateName(s kvv1.MemberState) string {
	switch s {
	case kvv1.MemberState_MEMBER_STATE_NORMAL:
		return "NORMAL"
	case kvv1.MemberState_MEMBER_STATE_JOINING:
		return "JOINING"
	case kvv1.MemberState_MEMBER_STATE_LEAVING:
		return "LEAVING"
	case kvv1.MemberState_MEMBER_STATE_LEFT:
		return "LEFT"
	case kvv1.MemberState_MEMBER_STATE_PENDING:
		return "PENDING"
	}
	return "UNKNOWN"
}
