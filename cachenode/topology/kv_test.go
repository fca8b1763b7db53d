package topology_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode/internal/kvtest"
	"github.com/portico-io/portico/cachenode/topology"
)

func TestEntriesAgainstKVNode(t *testing.T) {
	g := kvtest.Start(t, "cache")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := &topology.Client{Addrs: g.HTTPAddrs, Cluster: "prod"}
	other := &topology.Client{Addrs: g.HTTPAddrs, Cluster: "prodx"} // shares the key prefix "prod"

	if _, err := c.Get(ctx, "health/a"); !errors.Is(err, topology.ErrNotFound) {
		t.Fatalf("Get of an absent key: %v", err)
	}
	for _, name := range []string{"", "topology", "/x"} {
		if _, err := c.Put(ctx, name, []byte("x")); err == nil {
			t.Fatalf("Put(%q) accepted", name)
		}
	}

	events := make(chan topology.Entry, 16)
	connected := make(chan string, 4)
	wctx, wcancel := context.WithCancel(ctx)
	wdone := make(chan error, 1)
	go func() {
		wdone <- c.WatchPrefix(wctx, "health/", 0, func(e topology.Entry) error { events <- e; return nil },
			topology.WatchHooks{Connected: func(a string) { connected <- a }})
	}()
	defer func() { wcancel(); <-wdone }()
	<-connected

	r1, err := c.Put(ctx, "health/a", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.Get(ctx, "health/a")
	if err != nil || e.Revision != r1 || string(e.Value) != "one" || e.Name != "health/a" {
		t.Fatalf("Get = %+v, %v (put at %d)", e, err, r1)
	}
	// Create-only and compare-and-set on the revision.
	if _, err := c.CAS(ctx, "health/a", []byte("two"), 0); !errors.Is(err, topology.ErrConflict) {
		t.Fatalf("create-only over an existing key: %v", err)
	}
	if _, err := c.CAS(ctx, "health/a", []byte("two"), r1+100); !errors.Is(err, topology.ErrConflict) {
		t.Fatalf("wrong revision: %v", err)
	}
	r2, err := c.CAS(ctx, "health/a", []byte("two"), r1)
	if err != nil || r2 <= r1 {
		t.Fatalf("CAS = %d, %v", r2, err)
	}
	r3, err := c.CAS(ctx, "health/b", []byte("b"), 0)
	if err != nil {
		t.Fatal(err)
	}
	// Neither another prefix of this cluster nor another cluster's keys
	// reach the watch.
	if _, err := c.Put(ctx, "other/a", []byte("no")); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Put(ctx, "health/a", []byte("no")); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name, value string
		rev         uint64
	}{{"health/a", "one", r1}, {"health/a", "two", r2}, {"health/b", "b", r3}}
	for _, w := range want {
		select {
		case e := <-events:
			if e.Name != w.name || string(e.Value) != w.value || e.Revision != w.rev || e.Deleted {
				t.Fatalf("event %+v, want %+v", e, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event for %+v", w)
		}
	}
	select {
	case e := <-events:
		t.Fatalf("unexpected event %+v", e)
	case <-time.After(300 * time.Millisecond):
	}
	// The topology key itself is untouched by entries.
	if _, err := c.Load(ctx); !errors.Is(err, topology.ErrNotFound) {
		t.Fatalf("Load: %v", err)
	}
}
