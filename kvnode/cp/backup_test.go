package cp_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/portico-io/portico/kvnode/cp"
)

// A snapshot saved on one group restores into another (etcd's snapshot
// save / restore): keys with their revisions and leases; the target's
// next revisions pass the restored ones; a damaged snapshot is refused
// whole and changes nothing; a follower refuses both and names the leader.
func TestSnapshotSaveRestoreAcrossGroups(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	src := newGroup(t, 1)
	sg := src.groupOf(src.waitLeader())
	var revs []uint64
	for _, k := range []string{"a", "b", "c"} {
		e, err := sg.Put(ctx, "locks", k, []byte("v-"+k), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, e.Revision)
	}
	lease, err := sg.GrantLease(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sg.Put(ctx, "locks", "leased", []byte("l"), nil, lease); err != nil {
		t.Fatal(err)
	}
	if _, err := sg.Delete(ctx, "locks", "c", nil); err != nil {
		t.Fatal(err)
	}
	var snap bytes.Buffer
	at, err := sg.SaveSnapshot(ctx, &snap)
	if err != nil || at < revs[2] {
		t.Fatalf("SaveSnapshot = %d, %v", at, err)
	}

	dst := newGroup(t, 3)
	leader := dst.waitLeader()
	dg := dst.groupOf(leader)
	if _, err := dg.Put(ctx, "locks", "only-here", []byte("x"), nil, 0); err != nil {
		t.Fatal(err)
	}
	f := dst.groupOf(dst.follower(leader))
	var nl *cp.NotLeaderError
	if _, err := f.RestoreSnapshot(ctx, snap.Bytes()); !errors.As(err, &nl) || nl.LeaderID == "" {
		t.Fatalf("restore on a follower: %v", err)
	}
	if _, err := f.SaveSnapshot(ctx, &bytes.Buffer{}); !errors.As(err, &nl) {
		t.Fatalf("save on a follower: %v", err)
	}
	if _, err := dg.RestoreSnapshot(ctx, snap.Bytes()[:snap.Len()/2]); !errors.Is(err, cp.ErrBadSnapshot) {
		t.Fatalf("restore of half a snapshot: %v", err)
	}
	if e, err := dg.Get(ctx, "locks", "only-here", false); err != nil || string(e.Value) != "x" {
		t.Fatalf("a refused restore changed the state: %+v %v", e, err)
	}
	rev, err := dg.RestoreSnapshot(ctx, snap.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range []string{"a", "b"} {
		e, err := dg.Get(ctx, "locks", k, false)
		if err != nil || string(e.Value) != "v-"+k || e.Revision != revs[i] {
			t.Fatalf("restored %s = %+v, %v; want revision %d", k, e, err, revs[i])
		}
	}
	for _, k := range []string{"c", "only-here"} {
		if _, err := dg.Get(ctx, "locks", k, false); !errors.Is(err, cp.ErrNotFound) {
			t.Fatalf("%s after the restore: %v", k, err)
		}
	}
	if e, err := dg.Get(ctx, "locks", "leased", false); err != nil || e.Lease != lease {
		t.Fatalf("leased key after the restore: %+v %v", e, err)
	}
	e, err := dg.Put(ctx, "locks", "after", []byte("y"), nil, 0)
	if err != nil || e.Revision <= rev || e.Revision <= at {
		t.Fatalf("first write after the restore at %d (restored at %d, snapshot %d): %v", e.Revision, rev, at, err)
	}
	// Followers get the restored state (by snapshot install).
	for i := range 3 {
		g := dst.groupOf(i)
		if err := g.WaitApplied(ctx, e.Revision); err != nil {
			t.Fatal(err)
		}
		if e, ok := g.LocalGet("locks", "a"); !ok || e.Revision != revs[0] {
			t.Fatalf("node %d holds a as %+v, %v", i, e, ok)
		}
	}
}
