package membership

import (
	"slices"
	"testing"

	"github.com/portico-io/portico/kvnode/ring"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

const (
	normal  = kvv1.MemberState_MEMBER_STATE_NORMAL
	joining = kvv1.MemberState_MEMBER_STATE_JOINING
	leaving = kvv1.MemberState_MEMBER_STATE_LEAVING
	left    = kvv1.MemberState_MEMBER_STATE_LEFT
)

// A replacement takes a dead member's tokens: the current ring keeps the
// dead member until the flip, the pending ring has the replacement in its
// place, and no ring ever holds both; peers take the dead member's new
// state over the record they hold; the dead member, back with its old
// record, is refused by peers and stands down itself.
func TestTakeoverOfADeadMember(t *testing.T) {
	dead := &kvv1.Member{Id: "d", Addr: "d", Generation: 7, Version: 3, State: normal, Tokens: []uint64{10, 60}}
	other := &kvv1.Member{Id: "o", Addr: "o", Generation: 1, Version: 2, State: normal, Tokens: []uint64{30, 80}}
	r := New(Config{ID: "r", N: 2})
	r.Merge([]*kvv1.Member{dead, other})
	if !r.Takeover(joining, dead.Tokens, "d", leaving) {
		t.Fatal("takeover of a known member failed")
	}
	cur, fut := r.Rings()
	if ids := ringIDs(cur); !slices.Equal(ids, []string{"d", "o"}) {
		t.Fatalf("current ring %v, want d and o", ids)
	}
	if ids := ringIDs(fut); !slices.Equal(ids, []string{"o", "r"}) {
		t.Fatalf("pending ring %v, want o and r", ids)
	}
	if cur.Preference(10)[0] != "d" || fut.Preference(10)[0] != "r" {
		t.Fatalf("token 10: current %v, pending %v", cur.Preference(10), fut.Preference(10))
	}

	// A peer holding the dead member's old record takes the change.
	peer := New(Config{ID: "p", N: 2})
	peer.Merge([]*kvv1.Member{dead, other})
	peer.Merge(r.Snapshot())
	if m, _ := peer.Member("d"); m.State != leaving {
		t.Fatalf("peer holds d as %s after the takeover", m.State)
	}
	r.Takeover(normal, nil, "d", left)
	peer.Merge(r.Snapshot())
	if cur, fut := peer.Rings(); !slices.Equal(ringIDs(cur), []string{"o", "r"}) || !slices.Equal(ringIDs(fut), []string{"o", "r"}) {
		t.Fatalf("after the flip: current %v, pending %v", ringIDs(cur), ringIDs(fut))
	}

	// The dead member restarts with its old state (a newer generation).
	back := New(Config{ID: "d", N: 2, Generation: 100})
	back.SetSelf(normal, dead.Tokens)
	peer.Merge([]*kvv1.Member{back.Self()})
	if m, _ := peer.Member("d"); m.State != left {
		t.Fatal("a peer let a replaced member claim its tokens again")
	}
	if cur, _ := peer.Rings(); slices.Contains(ringIDs(cur), "d") {
		t.Fatal("the replaced member is back in the ring")
	}
	back.Merge(peer.Snapshot())
	if s := back.Self(); s.State != left {
		t.Fatalf("the replaced member is %s after hearing of its replacement, want LEFT", s.State)
	}
	// A fresh start of the same id (no tokens, then a join) is accepted.
	fresh := &kvv1.Member{Id: "d", Addr: "d", Generation: 200, Version: 1, State: kvv1.MemberState_MEMBER_STATE_PENDING}
	peer.Merge([]*kvv1.Member{fresh})
	if m, _ := peer.Member("d"); m.State != kvv1.MemberState_MEMBER_STATE_PENDING {
		t.Fatalf("a fresh start of d is %s on the peer", m.State)
	}
}

func ringIDs(r *ring.Ring) []string {
	var ids []string
	for _, n := range r.Nodes() {
		ids = append(ids, n.ID)
	}
	return ids
}
