package cp

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Local reads see what this node applied, one keyspace only; WaitApplied
// returns once the revision is applied, and ErrClosed when the group closes.
func TestLocalReadsAndWaitApplied(t *testing.T) {
	g := &Group{fsm: newFSM(), done: make(chan struct{})}
	applyCmd(t, g.fsm, 3, command{Op: OpPut, Key: "ks/b", Value: []byte("2")})
	applyCmd(t, g.fsm, 4, command{Op: OpPut, Key: "ks/a", Value: []byte("1")})
	applyCmd(t, g.fsm, 5, command{Op: OpPut, Key: "ks2/c", Value: []byte("3")})
	applyCmd(t, g.fsm, 6, command{Op: OpPut, Key: "k/d", Value: []byte("4")})
	if e, ok := g.LocalGet("ks", "a"); !ok || string(e.Value) != "1" || e.Revision != 4 {
		t.Fatalf("LocalGet: %+v %v", e, ok)
	}
	if _, ok := g.LocalGet("ks", "c"); ok {
		t.Fatal("LocalGet found a key of another keyspace")
	}
	got := g.LocalScan("ks")
	if len(got) != 2 || got[0].Key != "a" || got[1].Key != "b" || got[1].Revision != 3 {
		t.Fatalf("LocalScan: %+v", got)
	}

	done := make(chan error, 1)
	go func() { done <- g.WaitApplied(context.Background(), 8) }()
	applyCmd(t, g.fsm, 7, command{Op: OpDelete, Key: "ks/a"})
	select {
	case err := <-done:
		t.Fatalf("returned before revision 8 was applied: %v", err)
	default:
	}
	applyCmd(t, g.fsm, 8, command{Op: OpDelete, Key: "ks/b"})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := g.LocalScan("ks"); len(got) != 0 {
		t.Fatalf("LocalScan after deletes: %+v", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := g.WaitApplied(ctx, 100); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitApplied past the deadline: %v", err)
	}
	go func() { done <- g.WaitApplied(context.Background(), 100) }()
	close(g.done)
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitApplied on a closed group: %v", err)
	}
}
