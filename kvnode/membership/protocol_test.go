package membership

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/kvnode/ring"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// memMeta is Meta in memory.
type memMeta struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *memMeta) GetMeta(name string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.m[name]), nil
}

func (s *memMeta) PutMeta(name string, v []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string][]byte{}
	}
	s.m[name] = slices.Clone(v)
	return nil
}

// offline is a Transport and Streamer with no peer reachable.
type offline struct{}

var errOffline = errors.New("offline (test)")

func (offline) Gossip(context.Context, string, *kvv1.GossipRequest) (*kvv1.GossipResponse, error) {
	return nil, errOffline
}

func (offline) Rebalance(context.Context, string, *kvv1.RebalanceRequest) (*kvv1.RebalanceResponse, error) {
	return nil, errOffline
}
func (offline) GCBefore() time.Time { return time.Time{} }
func (offline) Pull(context.Context, string, ring.Range, time.Time) (int, error) {
	return 0, errOffline
}

func (offline) RepairRanges(context.Context, []ring.Range, string) (int, int, error) {
	return 0, 0, errOffline
}

// Two nodes that name each other as seeds found one evenly interleaved
// ring without talking (each takes its comb slot among the founders
// sorted by id); the place is persisted and a restart restores it.
func TestFoundersTakeInterleavedCombs(t *testing.T) {
	const vnodes = 4
	self := func(id, addr string, meta Meta, seed string) (*Membership, *Protocol) {
		m := New(Config{ID: id, Addr: addr, N: 2})
		return m, NewProtocol(ProtocolConfig{Seeds: []string{seed}, Vnodes: vnodes, AutoJoin: true}, m, meta, offline{}, offline{})
	}
	var metaA, metaB memMeta
	a, pa := self("a", "addr-a", &metaA, "addr-b")
	b, pb := self("b", "addr-b", &metaB, "addr-a")
	a.Merge([]*kvv1.Member{b.Self()})
	b.Merge([]*kvv1.Member{a.Self()})
	ctx := context.Background()
	pb.TakePlace(ctx) // b decides first: the order does not matter
	pa.TakePlace(ctx)
	step := ^uint64(0) / (2 * vnodes)
	for i, m := range []*Membership{a, b} {
		s := m.Self()
		if s.State != kvv1.MemberState_MEMBER_STATE_NORMAL {
			t.Fatalf("%s is %s after taking its place", s.Id, s.State)
		}
		for j, tok := range s.Tokens {
			if want := uint64(2*j+i) * step; tok != want {
				t.Fatalf("%s token %d is %d, want %d", s.Id, j, tok, want)
			}
		}
	}

	restarted := New(Config{ID: "a", Addr: "addr-a", N: 2})
	if err := NewProtocol(ProtocolConfig{}, restarted, &metaA, offline{}, offline{}).Restore(); err != nil {
		t.Fatal(err)
	}
	if s := restarted.Self(); s.State != kvv1.MemberState_MEMBER_STATE_NORMAL || !slices.Equal(s.Tokens, a.Self().Tokens) {
		t.Fatalf("restored %s with tokens %v, want NORMAL with %v", s.State, s.Tokens, a.Self().Tokens)
	}
	if _, ok := restarted.Member("b"); !ok {
		t.Fatal("the restored view lost member b")
	}
}

// A replacement is refused, wrapping ErrConflict, while the node is not
// new, and for a live or unknown node.
func TestReplaceRefusals(t *testing.T) {
	m := New(Config{ID: "r", Addr: "addr-r", N: 2})
	p := NewProtocol(ProtocolConfig{}, m, &memMeta{}, offline{}, offline{})
	m.Merge([]*kvv1.Member{{Id: "live", Addr: "addr-live", Generation: 1, Version: 1, State: kvv1.MemberState_MEMBER_STATE_NORMAL, Tokens: []uint64{7}}})
	for _, dead := range []string{"r", "ghost", "live"} {
		if _, err := p.Replace(context.Background(), dead); !errors.Is(err, ErrConflict) {
			t.Fatalf("replace %s: %v, want ErrConflict", dead, err)
		}
	}
	if s := m.Self(); s.State != kvv1.MemberState_MEMBER_STATE_PENDING {
		t.Fatalf("a refused replacement left this node %s", s.State)
	}
}
