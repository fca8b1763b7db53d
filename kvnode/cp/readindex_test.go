package cp_test

import (
	"strconv"
	"testing"
)

// Linearizable reads use the read index: after the first read of a term
// (a Barrier, which makes the new leader's commit index cover the earlier
// terms) they add nothing to the log, and each sees the write acknowledged
// just before it.
func TestReadIndexWritesNoLog(t *testing.T) {
	gr := newGroup(t, 3)
	l := gr.waitLeader()
	g := gr.groupOf(l)
	ctx := t.Context()
	if _, err := g.Put(ctx, "r", "k", []byte("0"), nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Get(ctx, "r", "k", false); err != nil {
		t.Fatal(err)
	}
	last := func() string { return g.Stats()["last_log_index"] }
	for i := range 20 {
		v := strconv.Itoa(i)
		e, err := g.Put(ctx, "r", "k", []byte(v), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		before := last()
		got, err := g.Get(ctx, "r", "k", false)
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Value) != v || got.Revision != e.Revision {
			t.Fatalf("read %q at %d after writing %q at %d", got.Value, got.Revision, v, e.Revision)
		}
		if after := last(); after != before {
			t.Fatalf("a linearizable read appended to the log: last index %s → %s", before, after)
		}
	}
}
