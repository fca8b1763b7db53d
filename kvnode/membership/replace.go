package membership

import (
	"context"
	"fmt"

	"github.com/portico-io/portico/kvnode/ring"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// Replacement is the outcome of Replace.
type Replacement struct {
	// Node is this node (the replacement), Replaced the dead node.
	Node, Replaced string
	Tokens         []uint64
	KeysStreamed   int
	// RangesVerified counts (range, replica) pairs whose Merkle trees were
	// compared after streaming; KeysRepaired the keys that comparison
	// still had to exchange (writes that raced the stream).
	RangesVerified, KeysRepaired int
}

// Replace (Cassandra's replace_address, etcd's member replace): this node,
// new and without tokens (not auto-joining), takes over the tokens of a
// dead NORMAL node of the same rack. In one announced step it becomes
// JOINING with those tokens and marks the dead node LEAVING, so
// coordinators write to it as the pending owner of exactly the dead node's
// ranges; it streams those ranges from every live replica, compares each
// with each live replica by Merkle tree (repairing what differs), then
// turns NORMAL as the dead node turns LEFT, in one announced step. A node
// replaced while down stands down if it returns. Safe to call again after
// a failure (it resumes, also after a restart). Refusals wrap ErrConflict.
func (p *Protocol) Replace(ctx context.Context, dead string) (Replacement, error) {
	p.moveMu.Lock()
	self := p.mem.Self()
	if self.State == kvv1.MemberState_MEMBER_STATE_JOINING {
		was, err := p.meta.GetMeta(metaReplacing)
		p.moveMu.Unlock()
		if err != nil {
			return Replacement{}, err
		}
		if string(was) != dead {
			return Replacement{}, fmt.Errorf("%w: this node is already joining (replacing %q)", ErrConflict, was)
		}
		return p.finishReplace(ctx, dead)
	}
	err := p.startReplace(self, dead)
	p.moveMu.Unlock()
	if err != nil {
		return Replacement{}, err
	}
	return p.finishReplace(ctx, dead)
}

// startReplace checks the replacement is safe and takes the dead node's
// tokens (JOINING, dead node LEAVING), persisted; p.moveMu held.
func (p *Protocol) startReplace(self *kvv1.Member, dead string) error {
	bad := func(msg string, args ...any) error {
		return fmt.Errorf("%w: cannot replace %s: %s", ErrConflict, dead, fmt.Sprintf(msg, args...))
	}
	if self.State != kvv1.MemberState_MEMBER_STATE_PENDING {
		return bad("this node is %s; start a new node (new id, empty data dir, --join-mode manual) to replace it", StateName(self.State))
	}
	if dead == self.Id {
		return bad("a node cannot replace itself; give the new node a new id")
	}
	m, ok := p.mem.Member(dead)
	switch {
	case !ok:
		return bad("no such member (known: %v)", p.memberIDs())
	case m.State != kvv1.MemberState_MEMBER_STATE_NORMAL || len(m.Tokens) == 0:
		return bad("it is %s; only a NORMAL member holding tokens can be replaced", StateName(m.State))
	case p.mem.Alive(dead):
		return bad("it is alive as this node sees it; replace only a dead node (decommission a live one)")
	case m.Rack != self.Rack:
		return bad("it is in rack %q and this node in %q: a replacement keeps the replica placement, so it must be in the same rack", m.Rack, self.Rack)
	}
	if Moving(p.mem.Rings()) {
		return bad("a join or leave is in progress; one ring change at a time")
	}
	if err := p.meta.PutMeta(metaReplacing, []byte(dead)); err != nil {
		return err
	}
	return p.persistTakeover(kvv1.MemberState_MEMBER_STATE_JOINING, m.Tokens, dead, kvv1.MemberState_MEMBER_STATE_LEAVING)
}

func (p *Protocol) memberIDs() []string {
	var ids []string
	for _, m := range p.mem.Snapshot() {
		ids = append(ids, m.Id)
	}
	return ids
}

// persistTakeover is persistSelf for a replacement: the local state and
// the dead node's change in one membership step (Membership.Takeover).
func (p *Protocol) persistTakeover(state kvv1.MemberState, tokens []uint64, dead string, deadState kvv1.MemberState) error {
	if tokens != nil {
		if err := p.meta.PutMeta(metaTokens, encodeTokens(tokens)); err != nil {
			return err
		}
	}
	if err := p.meta.PutMeta(metaState, []byte{byte(state)}); err != nil {
		return err
	}
	if !p.mem.Takeover(state, tokens, dead, deadState) {
		return fmt.Errorf("kvnode: %s is not a member", dead)
	}
	p.savePeers()
	return nil
}

// finishReplace announces the takeover, streams and verifies the ranges,
// then flips ownership; idempotent.
func (p *Protocol) finishReplace(ctx context.Context, dead string) (Replacement, error) {
	p.moveMu.Lock()
	defer p.moveMu.Unlock()
	self := p.mem.ID()
	res := Replacement{Node: self, Replaced: dead, Tokens: p.mem.Self().Tokens}
	if err := p.announce(ctx); err != nil {
		return res, err
	}
	var err error
	if res.KeysStreamed, err = p.PullGained(ctx); err != nil {
		return res, err
	}
	// Verify: every range this node will serve, against every other live
	// replica of it (one tree request per peer). Writes racing the stream
	// reach this node as pending owner, so differences left here are rare;
	// they are repaired both ways.
	_, fut := p.mem.Rings()
	byPeer := map[string][]ring.Range{}
	for _, rg := range fut.RangesOf(self) {
		verified := 0
		for _, peer := range rg.Replicas {
			if peer != self && p.mem.Alive(peer) {
				byPeer[peer] = append(byPeer[peer], rg)
				verified++
			}
		}
		if verified == 0 {
			return res, fmt.Errorf("%w: range (%d,%d]: no live replica to verify it against", ErrConflict, rg.Start, rg.End)
		}
	}
	for peer, ranges := range byPeer {
		pulled, pushed, err := p.stream.RepairRanges(ctx, ranges, peer)
		if err != nil {
			return res, fmt.Errorf("kvnode: verifying ranges with %s: %w", peer, err)
		}
		res.KeysRepaired += pulled + pushed
		res.RangesVerified += len(ranges)
	}
	if err := p.persistTakeover(kvv1.MemberState_MEMBER_STATE_NORMAL, nil, dead, kvv1.MemberState_MEMBER_STATE_LEFT); err != nil {
		return res, err
	}
	if err := p.meta.PutMeta(metaReplacing, nil); err != nil {
		return res, err
	}
	p.cfg.Logger.Info("kvnode: replaced", "dead", dead, "keys_streamed", res.KeysStreamed, "keys_repaired", res.KeysRepaired)
	return res, p.announce(ctx)
}
