package cp

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

func applyCmd(t *testing.T, f *fsm, index uint64, c command) applyResult {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: b}).(applyResult)
}

func rev(n uint64) *uint64 { return &n }

func TestFSMCompareAndSet(t *testing.T) {
	f := newFSM()
	// If-Match 0: create only.
	if r := applyCmd(t, f, 3, command{Op: OpPut, Key: "ks/a", Value: []byte("v1"), IfRevision: rev(0)}); r.Err != nil || r.Entry.Revision != 3 {
		t.Fatalf("create: %+v", r)
	}
	r := applyCmd(t, f, 4, command{Op: OpPut, Key: "ks/a", Value: []byte("v2"), IfRevision: rev(0)})
	var ce *ConflictError
	if !errors.As(r.Err, &ce) || ce.Current != 3 || ce.Expected != 0 {
		t.Fatalf("second create: %+v", r)
	}
	if r := applyCmd(t, f, 5, command{Op: OpPut, Key: "ks/a", Value: []byte("v2"), IfRevision: rev(2)}); !errors.Is(r.Err, ErrConflict) {
		t.Fatalf("stale CAS applied: %+v", r)
	}
	if r := applyCmd(t, f, 6, command{Op: OpPut, Key: "ks/a", Value: []byte("v3"), IfRevision: rev(3)}); r.Err != nil || r.Entry.Revision != 6 {
		t.Fatalf("CAS: %+v", r)
	}
	if e := f.get("ks/a"); string(e.Value) != "v3" || e.Revision != 6 {
		t.Fatalf("state %+v", e)
	}
	// Keyspaces are separate.
	if e := f.get("other/a"); e.Revision != 0 {
		t.Fatalf("other keyspace sees %+v", e)
	}
	if r := applyCmd(t, f, 7, command{Op: OpDelete, Key: "ks/a", IfRevision: rev(5)}); !errors.Is(r.Err, ErrConflict) {
		t.Fatalf("stale conditional delete: %+v", r)
	}
	if r := applyCmd(t, f, 8, command{Op: OpDelete, Key: "ks/a", IfRevision: rev(6)}); r.Err != nil || r.Revision != 8 {
		t.Fatalf("delete: %+v", r)
	}
	if r := applyCmd(t, f, 9, command{Op: OpDelete, Key: "ks/a"}); !errors.Is(r.Err, ErrNotFound) {
		t.Fatalf("delete absent: %+v", r)
	}
	// After a delete the key is absent again: If-Match 0 creates it.
	if r := applyCmd(t, f, 10, command{Op: OpPut, Key: "ks/a", Value: []byte("v4"), IfRevision: rev(0)}); r.Err != nil {
		t.Fatalf("recreate: %+v", r)
	}
	if f.revision() != 10 {
		t.Fatalf("applied %d", f.revision())
	}
}

func TestFSMSnapshotRestore(t *testing.T) {
	f := newFSM()
	for i := uint64(1); i <= 50; i++ {
		applyCmd(t, f, i, command{Op: OpPut, Key: fmt.Sprintf("ks/k%d", i%20), Value: []byte(fmt.Sprint(i))})
	}
	applyCmd(t, f, 51, command{Op: OpNode, NodeID: "n1", HTTPAddr: "127.0.0.1:1"})
	applyCmd(t, f, 52, command{Op: OpDelete, Key: "ks/k3"})
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Writes after the snapshot must not leak into it.
	applyCmd(t, f, 53, command{Op: OpPut, Key: "ks/k4", Value: []byte("late")})

	store := raft.NewInmemSnapshotStore()
	sink, err := store.Create(raft.SnapshotVersionMax, 52, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	_, rc, err := store.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	restored := 0
	g := newFSM()
	g.onRestore = func() { restored++ }
	if err := g.Restore(rc); err != nil {
		t.Fatal(err)
	}
	if restored != 1 || g.revision() != 52 || g.nodeHTTP("n1") != "127.0.0.1:1" {
		t.Fatalf("restored=%d applied=%d node=%q", restored, g.revision(), g.nodeHTTP("n1"))
	}
	if e := g.get("ks/k3"); e.Revision != 0 {
		t.Fatalf("deleted key restored: %+v", e)
	}
	if e := g.get("ks/k4"); string(e.Value) != "44" || e.Revision != 44 {
		t.Fatalf("k4 = %+v, want the value at the snapshot", e)
	}
	if len(g.kv) != 19 {
		t.Fatalf("%d keys restored, want 19", len(g.kv))
	}
}

func TestParsePeers(t *testing.T) {
	p, err := ParsePeers(" kv0=127.0.0.1:18600, kv1=h:18601 ,")
	if err != nil || len(p) != 2 || p[1] != (Peer{ID: "kv1", Addr: "h:18601"}) {
		t.Fatalf("%v %v", p, err)
	}
	for _, bad := range []string{"kv0", "=a:1", "kv0=nohostport", "a=h:1,a=h:2"} {
		if _, err := ParsePeers(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestFSMTxnAllOrNothing(t *testing.T) {
	f := newFSM()
	applyCmd(t, f, 1, command{Op: OpPut, Key: "acct/a", Value: []byte("10")})
	applyCmd(t, f, 2, command{Op: OpPut, Key: "acct/b", Value: []byte("5")})
	v10 := []byte("10")
	// One failing compare (b is at 2, not 1): nothing applies.
	r := applyCmd(t, f, 3, command{Op: OpTxn,
		Compares: []Compare{{Keyspace: "acct", Key: "a", Revision: rev(1)}, {Keyspace: "acct", Key: "b", Revision: rev(1)}},
		Ops:      []TxnOp{{Op: OpPut, Keyspace: "acct", Key: "a", Value: []byte("7")}, {Op: OpDelete, Keyspace: "acct", Key: "b"}}})
	var tc *TxnConflictError
	if !errors.As(r.Err, &tc) || fmt.Sprint(tc.Failed) != "[1]" || fmt.Sprint(tc.Current) != "[1 2]" {
		t.Fatalf("conflict: %+v", r)
	}
	if e := f.get("acct/a"); string(e.Value) != "10" || f.get("acct/b").Revision != 2 {
		t.Fatalf("failed txn changed state: a=%+v b=%+v", e, f.get("acct/b"))
	}
	// A value compare on an absent key fails; a revision-0 compare holds.
	r = applyCmd(t, f, 4, command{Op: OpTxn, Compares: []Compare{{Keyspace: "acct", Key: "c", Value: &v10}}, Ops: []TxnOp{{Op: OpPut, Keyspace: "acct", Key: "c", Value: []byte("x")}}})
	if !errors.Is(r.Err, ErrConflict) {
		t.Fatalf("value compare on absent key: %+v", r)
	}
	// All compares hold: every op applies at one revision.
	r = applyCmd(t, f, 5, command{Op: OpTxn,
		Compares: []Compare{{Keyspace: "acct", Key: "a", Revision: rev(1), Value: &v10}, {Keyspace: "acct", Key: "b", Revision: rev(2)}, {Keyspace: "acct", Key: "c", Revision: rev(0)}},
		Ops: []TxnOp{{Op: OpPut, Keyspace: "acct", Key: "a", Value: []byte("7")}, {Op: OpDelete, Keyspace: "acct", Key: "b"},
			{Op: OpPut, Keyspace: "acct", Key: "c", Value: []byte("8")}}})
	if r.Err != nil || r.Revision != 5 {
		t.Fatalf("txn: %+v", r)
	}
	if a, b, c := f.get("acct/a"), f.get("acct/b"), f.get("acct/c"); string(a.Value) != "7" || a.Revision != 5 || b.Revision != 0 || string(c.Value) != "8" || c.Revision != 5 {
		t.Fatalf("after txn a=%+v b=%+v c=%+v", a, b, c)
	}
}

func TestFSMLeases(t *testing.T) {
	f := newFSM()
	applyCmd(t, f, 1, command{Op: OpLeaseGrant, TTLSeconds: 5})
	if r := applyCmd(t, f, 2, command{Op: OpPut, Key: "s/a", Value: []byte("a"), Lease: 1}); r.Err != nil {
		t.Fatal(r.Err)
	}
	applyCmd(t, f, 3, command{Op: OpPut, Key: "s/b", Value: []byte("b"), Lease: 1})
	// Overwritten without the lease: detached, survives the revoke.
	applyCmd(t, f, 4, command{Op: OpPut, Key: "s/b", Value: []byte("b2")})
	applyCmd(t, f, 5, command{Op: OpPut, Key: "s/c", Value: []byte("c"), Lease: 1})
	if r := applyCmd(t, f, 6, command{Op: OpPut, Key: "s/d", Value: []byte("d"), Lease: 99}); !errors.Is(r.Err, ErrLeaseNotFound) || f.get("s/d").Revision != 0 {
		t.Fatalf("put on unknown lease: %+v", r)
	}
	// The lease and its keys survive a snapshot.
	snap, _ := f.Snapshot()
	store := raft.NewInmemSnapshotStore()
	sink, _ := store.Create(raft.SnapshotVersionMax, 6, 1, raft.Configuration{}, 1, nil)
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	_, rc, _ := store.Open(sink.ID())
	g := newFSM()
	if err := g.Restore(rc); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*fsm{f, g} {
		if ttl := m.leaseTTLs(); ttl[1] != 5 || len(ttl) != 1 {
			t.Fatalf("leases %v", ttl)
		}
		if r := applyCmd(t, m, 7, command{Op: OpLeaseRevoke, LeaseID: 1}); r.Err != nil {
			t.Fatal(r.Err)
		}
		if m.get("s/a").Revision != 0 || m.get("s/c").Revision != 0 || string(m.get("s/b").Value) != "b2" {
			t.Fatalf("after revoke a=%+v b=%+v c=%+v", m.get("s/a"), m.get("s/b"), m.get("s/c"))
		}
		if r := applyCmd(t, m, 8, command{Op: OpLeaseRevoke, LeaseID: 1}); !errors.Is(r.Err, ErrLeaseNotFound) {
			t.Fatalf("second revoke: %+v", r)
		}
	}
}
