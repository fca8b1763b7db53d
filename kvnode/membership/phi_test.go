package membership

import (
	"testing"
	"time"

	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestPhiRisesWithSilenceRelativeToRhythm(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	m := New(Config{ID: "a", N: 3, Interval: time.Second, Now: c.now})
	peer := &kvv1.Member{Id: "b", Addr: "b:1", Generation: 1}
	for range 20 {
		c.t = c.t.Add(time.Second)
		peer.Heartbeat++
		m.Merge([]*kvv1.Member{peer})
	}
	if !m.Alive("b") {
		t.Fatal("regular peer marked down")
	}
	c.t = c.t.Add(3 * time.Second)
	if !m.Alive("b") || m.Phi("b") > 2 {
		t.Fatalf("3 missed beats: phi %.2f, want low", m.Phi("b"))
	}
	c.t = c.t.Add(20 * time.Second)
	if m.Alive("b") {
		t.Fatalf("23s silent with 1s rhythm: phi %.2f, still alive", m.Phi("b"))
	}
	// It comes back.
	peer.Heartbeat++
	m.Merge([]*kvv1.Member{peer})
	if !m.Alive("b") {
		t.Fatal("peer not alive after a heartbeat")
	}
	// A slow but regular peer (10s rhythm) is not down after 20s.
	p2 := &kvv1.Member{Id: "c", Addr: "c:1", Generation: 1}
	for range 30 {
		c.t = c.t.Add(10 * time.Second)
		p2.Heartbeat++
		m.Merge([]*kvv1.Member{p2})
	}
	c.t = c.t.Add(20 * time.Second)
	if !m.Alive("c") {
		t.Fatalf("slow regular peer marked down at phi %.2f", m.Phi("c"))
	}
}

func TestMergeKeepsNewestStateAndBuildsRings(t *testing.T) {
	m := New(Config{ID: "a", N: 3, Interval: time.Second})
	m.SetSelf(kvv1.MemberState_MEMBER_STATE_NORMAL, []uint64{1, 100})
	b := &kvv1.Member{Id: "b", Addr: "b", Generation: 1, Version: 2, State: kvv1.MemberState_MEMBER_STATE_JOINING, Tokens: []uint64{50}}
	if !m.Merge([]*kvv1.Member{b}) {
		t.Fatal("a new member must change the rings")
	}
	cur, fut := m.Rings()
	if len(cur.Nodes()) != 1 || len(fut.Nodes()) != 2 {
		t.Fatalf("joining member: current %d nodes, future %d", len(cur.Nodes()), len(fut.Nodes()))
	}
	stale := &kvv1.Member{Id: "b", Addr: "b", Generation: 1, Version: 1, State: kvv1.MemberState_MEMBER_STATE_PENDING}
	if m.Merge([]*kvv1.Member{stale}) {
		t.Fatal("an older version replaced a newer one")
	}
	b2 := &kvv1.Member{Id: "b", Addr: "b", Generation: 1, Version: 3, State: kvv1.MemberState_MEMBER_STATE_NORMAL, Tokens: []uint64{50}}
	m.Merge([]*kvv1.Member{b2})
	if cur, _ := m.Rings(); len(cur.Nodes()) != 2 {
		t.Fatal("normal member missing from the current ring")
	}
}

func TestSelfGenerationMovesPastAStaleNewerRecord(t *testing.T) {
	m := New(Config{ID: "a", N: 3, Generation: 100})
	m.Merge([]*kvv1.Member{{Id: "a", Generation: 500, Version: 9}})
	if g := m.Self().Generation; g <= 500 {
		t.Fatalf("generation %d, want > 500", g)
	}
}

func TestOwnEchoedRecordChangesNothing(t *testing.T) {
	m := New(Config{ID: "a", N: 3, Generation: 100})
	if m.Merge([]*kvv1.Member{m.Self()}) {
		t.Fatal("our own record echoed back changed the ring")
	}
	if g := m.Self().Generation; g != 100 {
		t.Fatalf("generation moved to %d", g)
	}
}
