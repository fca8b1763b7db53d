// Package membership tracks the cluster's members as spread by gossip: each
// node's id, address, rack, tokens, ring state (pending, joining, normal,
// leaving, left) and heartbeat, plus a phi-accrual suspicion score per peer.
// Down is a local, temporary judgement made from the score; removal from the
// ring only happens through an explicit state change (decommission).
//
// Membership is the view and its merge rules; Protocol is the node's side
// of the protocol that moves it: gossip rounds, announcements, and the
// ring moves (found, join, decommission, replace) with their range
// streaming, persisted so a restart resumes them. Protocol reaches storage,
// peers and anti-entropy only through the role interfaces Meta, Transport
// and Streamer, so this package depends on the ring alone.
package membership

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/portico-io/portico/kvnode/ring"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// Defaults for Config.
const (
	DefaultPhiThreshold = 8.0
	DefaultInterval     = time.Second
)

// Config configures New.
type Config struct {
	ID, Addr, Rack string
	// Generation distinguishes restarts (default: now in unix ms).
	Generation uint64
	// N is the replication factor the rings are built with.
	N int
	// PhiThreshold marks a peer down above it (default 8).
	PhiThreshold float64
	// Interval is the expected heartbeat period (default 1s).
	Interval time.Duration
	// Now is the clock (default time.Now); tests inject one.
	Now func() time.Time
}

// Membership is safe for concurrent use.
type Membership struct {
	cfg     Config
	mu      sync.Mutex
	members map[string]*kvv1.Member
	det     map[string]*detector
	current *ring.Ring
	future  *ring.Ring
	changed chan struct{}
}

// New starts with only the local node, in state PENDING without tokens.
func New(cfg Config) *Membership {
	if cfg.PhiThreshold <= 0 {
		cfg.PhiThreshold = DefaultPhiThreshold
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Generation == 0 {
		cfg.Generation = uint64(cfg.Now().UnixMilli())
	}
	m := &Membership{cfg: cfg, members: map[string]*kvv1.Member{}, det: map[string]*detector{}, changed: make(chan struct{})}
	m.members[cfg.ID] = &kvv1.Member{
		Id: cfg.ID, Addr: cfg.Addr, Rack: cfg.Rack, Generation: cfg.Generation,
		State: kvv1.MemberState_MEMBER_STATE_PENDING, Version: 1,
	}
	m.rebuildLocked()
	return m
}

// ID is the local node's id.
func (m *Membership) ID() string { return m.cfg.ID }

// Beat advances the local heartbeat; call once per gossip round.
func (m *Membership) Beat() {
	m.mu.Lock()
	m.members[m.cfg.ID].Heartbeat++
	m.mu.Unlock()
}

// SetSelf changes the local node's ring state and tokens (nil keeps them).
func (m *Membership) SetSelf(state kvv1.MemberState, tokens []uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	me := m.members[m.cfg.ID]
	me.State = state
	if tokens != nil {
		me.Tokens = slices.Clone(tokens)
	}
	me.Version++
	m.rebuildLocked()
}

// Self returns a copy of the local member.
func (m *Membership) Self() *kvv1.Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	return proto.Clone(m.members[m.cfg.ID]).(*kvv1.Member)
}

func newer(a, b *kvv1.Member) int {
	if c := cmp.Compare(a.Generation, b.Generation); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Version, b.Version); c != 0 {
		return c
	}
	return cmp.Compare(a.Heartbeat, b.Heartbeat)
}

// Merge folds in a peer's view. Newer (generation, version, heartbeat)
// states replace older ones; a heartbeat advance feeds the peer's failure
// detector. It reports whether a member's ring state or tokens changed.
func (m *Membership) Merge(from []*kvv1.Member) bool {
	now := m.cfg.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	ringChanged := false
	for _, in := range from {
		if in.GetId() == "" {
			continue
		}
		if in.Id == m.cfg.ID {
			me := m.members[m.cfg.ID]
			if replaced(in, me) {
				// Another node took our tokens while we were down
				// (Takeover): stand down instead of claiming them again.
				me.State = kvv1.MemberState_MEMBER_STATE_LEFT
				me.Generation = max(me.Generation, in.Generation)
				me.Version = max(me.Version, in.Version) + 1
				ringChanged = true
				continue
			}
			// Peers hold a record of us newer than our own (a restart with
			// the clock behind the last generation): move past it, or every
			// peer would ignore our heartbeats and judge us down.
			if newer(in, me) > 0 {
				me.Generation = in.Generation + 1
				me.Version++
				ringChanged = true
			}
			continue
		}
		cur, ok := m.members[in.Id]
		if ok && newer(in, cur) <= 0 {
			continue
		}
		if ok && replaced(cur, in) {
			// A replaced node come back with its old state: it left the
			// ring; only a fresh start (no tokens, then a join) re-enters.
			continue
		}
		if !ok || cur.Generation != in.Generation || cur.Version != in.Version {
			ringChanged = true
		}
		m.members[in.Id] = proto.Clone(in).(*kvv1.Member)
		if d, ok := m.det[in.Id]; ok {
			d.heartbeat(now)
		} else {
			m.det[in.Id] = newDetector(now, m.cfg.Interval)
		}
	}
	if ringChanged {
		m.rebuildLocked()
	}
	return ringChanged
}

// replaced reports whether held, a LEFT record, says that claim (a record
// of the same node serving tokens, NORMAL or LEAVING) is stale: the node
// left, or was replaced, with exactly these tokens.
func replaced(held, claim *kvv1.Member) bool {
	serving := claim.State == kvv1.MemberState_MEMBER_STATE_NORMAL || claim.State == kvv1.MemberState_MEMBER_STATE_LEAVING
	return held.State == kvv1.MemberState_MEMBER_STATE_LEFT && serving && slices.Equal(held.Tokens, claim.Tokens)
}

// Takeover sets the local node to state (and tokens, when not nil) and
// member other to otherState in one step, with one ring rebuild, so no
// ring ever holds both with the same tokens. A node replacing a dead one
// (which cannot announce anything itself) uses it to mark the dead node
// LEAVING while it joins with its tokens, then LEFT as it turns NORMAL;
// the dead node's version is bumped so peers take the change over the
// record they hold.
func (m *Membership) Takeover(state kvv1.MemberState, tokens []uint64, other string, otherState kvv1.MemberState) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.members[other]
	if !ok || other == m.cfg.ID {
		return false
	}
	me := m.members[m.cfg.ID]
	me.State = state
	if tokens != nil {
		me.Tokens = slices.Clone(tokens)
	}
	me.Version++
	if o.State != otherState {
		o.State = otherState
		o.Version++
	}
	m.rebuildLocked()
	return true
}

// Snapshot returns copies of every known member, sorted by id.
func (m *Membership) Snapshot() []*kvv1.Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*kvv1.Member, 0, len(m.members))
	for _, mem := range m.members {
		out = append(out, proto.Clone(mem).(*kvv1.Member))
	}
	slices.SortFunc(out, func(a, b *kvv1.Member) int { return cmp.Compare(a.Id, b.Id) })
	return out
}

// Member returns a copy of one member.
func (m *Membership) Member(id string) (*kvv1.Member, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mem, ok := m.members[id]
	if !ok {
		return nil, false
	}
	return proto.Clone(mem).(*kvv1.Member), true
}

// Phi is the current suspicion level of id (0 for the local node).
func (m *Membership) Phi(id string) float64 {
	if id == m.cfg.ID {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.det[id]
	if !ok {
		return 0
	}
	return d.phi(m.cfg.Now())
}

// Alive reports whether id is believed up: known, not LEFT, and its phi is
// under the threshold.
func (m *Membership) Alive(id string) bool {
	if id == m.cfg.ID {
		return true
	}
	m.mu.Lock()
	mem, ok := m.members[id]
	d := m.det[id]
	m.mu.Unlock()
	if !ok || mem.State == kvv1.MemberState_MEMBER_STATE_LEFT || d == nil {
		return false
	}
	return m.Phi(id) < m.cfg.PhiThreshold
}

// Rings returns the ring serving reads and writes now (NORMAL and LEAVING
// members) and the ring after pending moves complete (NORMAL and JOINING).
// They are equal when nothing is moving.
func (m *Membership) Rings() (current, future *ring.Ring) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.current, m.future
}

// Changed returns a channel closed at the next ring-relevant change.
func (m *Membership) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

func (m *Membership) rebuildLocked() {
	var cur, fut []ring.Node
	for _, mem := range m.members {
		if len(mem.Tokens) == 0 {
			continue
		}
		n := ring.Node{ID: mem.Id, Addr: mem.Addr, Rack: mem.Rack, Tokens: mem.Tokens}
		switch mem.State {
		case kvv1.MemberState_MEMBER_STATE_NORMAL:
			cur, fut = append(cur, n), append(fut, n)
		case kvv1.MemberState_MEMBER_STATE_LEAVING:
			cur = append(cur, n)
		case kvv1.MemberState_MEMBER_STATE_JOINING:
			fut = append(fut, n)
		}
	}
	m.current, m.future = ring.New(cur, m.cfg.N), ring.New(fut, m.cfg.N)
	close(m.changed)
	m.changed = make(chan struct{})
}

// Addr returns the internode address of id.
func (m *Membership) Addr(id string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mem, ok := m.members[id]
	if !ok {
		return "", false
	}
	return mem.Addr, true
}
