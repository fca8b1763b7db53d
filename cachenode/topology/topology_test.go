package topology_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/internal/kvtest"
	"github.com/portico-io/portico/cachenode/topology"
)

func spec(epoch uint64, ranges ...string) cluster.Spec {
	s := cluster.Spec{Epoch: epoch}
	for i, r := range ranges {
		s.Nodes = append(s.Nodes, cluster.NodeSpec{ID: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: 7000 + i, Slots: []string{r}})
	}
	return s
}

func TestClientAgainstKVNode(t *testing.T) {
	g := kvtest.Start(t, "cache")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// The first address refuses connections: the client moves on.
	c := &topology.Client{Addrs: append([]string{"127.0.0.1:1"}, g.HTTPAddrs...), Cluster: "prod"}

	if _, err := c.Load(ctx); !errors.Is(err, topology.ErrNotFound) {
		t.Fatalf("Load of an empty store: %v", err)
	}
	if _, err := c.Publish(ctx, spec(1, "0-10", "10-16383"), 0); err == nil {
		t.Fatal("an overlapping map was published")
	}
	if _, err := c.Publish(ctx, spec(1, "0-8191", "8192-16383"), 7); !errors.Is(err, topology.ErrConflict) {
		t.Fatalf("expected revision 7 of an empty store: %v", err)
	}
	r1, err := c.Publish(ctx, spec(1, "0-8191", "8192-16383"), 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Load(ctx)
	if err != nil || got.Revision != r1 || got.Spec.Epoch != 1 || got.Spec.Nodes[1].Slots[0] != "8192-16383" {
		t.Fatalf("Load = %+v, %v (published at %d)", got, err, r1)
	}
	// The epoch must rise, checked before the write.
	for _, e := range []uint64{0, 1} {
		if _, err := c.Publish(ctx, spec(e, "0-100", "101-16383"), r1); !errors.Is(err, topology.ErrEpoch) {
			t.Fatalf("epoch %d over 1: %v", e, err)
		}
	}

	// A watch from the next revision sees each later publish once.
	updates := make(chan topology.Update, 16)
	wctx, wcancel := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	connected := make(chan string, 16)
	go func() {
		wdone <- c.Watch(wctx, r1+1, func(u topology.Update) error { updates <- u; return nil },
			topology.WatchHooks{Connected: func(a string) { connected <- a }})
	}()
	defer func() { wcancel(); <-wdone }()
	watchAddr := <-connected

	// Two writers from the same revision: one installs its map, the other
	// gets a conflict and changes nothing.
	var wg sync.WaitGroup
	results := make([]error, 2)
	revs := make([]uint64, 2)
	for i := range 2 {
		wg.Go(func() {
			revs[i], results[i] = c.Publish(ctx, spec(2, fmt.Sprintf("0-%d", 100+i), fmt.Sprintf("%d-16383", 101+i)), r1)
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range results {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatal("both writers published")
			}
			winner = i
		case !errors.Is(err, topology.ErrConflict):
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no writer published: %v", results)
	}
	r2 := revs[winner]
	got, err = c.Load(ctx)
	if err != nil || got.Revision != r2 || got.Spec.Nodes[0].Slots[0] != fmt.Sprintf("0-%d", 100+winner) {
		t.Fatalf("stored %+v, %v; winner %d at %d", got, err, winner, r2)
	}
	u := <-updates
	if u.Revision != r2 || u.Err != nil || u.Spec.Epoch != 2 || !bytes.Equal(u.Raw, got.Raw) {
		t.Fatalf("watch update %+v, want revision %d", u, r2)
	}
	// The stale writer retries on its old revision: refused.
	if _, err := c.Publish(ctx, spec(3, "0-5", "6-16383"), r1); !errors.Is(err, topology.ErrConflict) {
		t.Fatalf("stale revision: %v", err)
	}

	// Kill the node serving the watch (and, if it leads, the leader): the
	// watch resumes elsewhere and sees the next publish exactly once.
	for i, a := range g.HTTPAddrs {
		if a == watchAddr {
			g.Kill(i)
		}
	}
	g.WaitLeader(30 * time.Second)
	r3, err := c.Publish(ctx, spec(3, "0-200", "201-16383"), r2)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case u := <-updates:
		if u.Revision != r3 || u.Spec.Epoch != 3 {
			t.Fatalf("after the node died: update %+v, want revision %d", u, r3)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the watch did not resume on another node")
	}
	select {
	case u := <-updates:
		t.Fatalf("an update seen twice or out of nowhere: %+v", u)
	case <-time.After(300 * time.Millisecond):
	}
}
