package cp_test

import (
	"strconv"
	"testing"
)

// Linearizable reads use the read index: after the first read of a term
// (a Barrier, which makes the new leader's commit index cover the earlier
// terms) they add nothing to the log, and each sees the write acknowledged
// just before it. An election during a round (the test timeouts are short,
// and a loaded machine can miss a heartbeat) appends to the log by itself,
// so such a round is run again.
func TestReadIndexWritesNoLog(t *testing.T) {
	gr := newGroup(t, 3)
	ctx := t.Context()
	clean := 0
	for round := 0; clean < 20; round++ {
		if round == 200 {
			t.Fatalf("only %d of 200 rounds ran under one leader in one term", clean)
		}
		g := gr.groupOf(gr.waitLeader())
		term := g.Stats()["term"]
		v := strconv.Itoa(round)
		e, err := g.Put(ctx, "r", "k", []byte(v), nil, 0)
		if err != nil {
			continue // leadership moved
		}
		if _, err := g.Get(ctx, "r", "k", false); err != nil {
			continue // the term's first read (a Barrier) or leadership moved
		}
		before := g.Stats()
		got, err := g.Get(ctx, "r", "k", false)
		if err != nil {
			continue
		}
		after := g.Stats()
		if string(got.Value) != v || got.Revision != e.Revision {
			t.Fatalf("read %q at %d after writing %q at %d", got.Value, got.Revision, v, e.Revision)
		}
		if after["term"] != term || before["term"] != term {
			continue
		}
		if before["last_log_index"] != after["last_log_index"] {
			t.Fatalf("a linearizable read appended to the log: last index %s → %s", before["last_log_index"], after["last_log_index"])
		}
		clean++
	}
}
