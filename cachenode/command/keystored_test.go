package command_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode/bus"
	"github.com/portico-io/portico/cachenode/command"
	"github.com/portico-io/portico/cachenode/namespace"
	"github.com/portico-io/portico/cachenode/repl"
	"github.com/portico-io/portico/cachenode/resp"
)

// TestReplicatedWritesServeBlockedClients: a client blocked on a replica
// (BLPOP and BZPOPMIN) is served when the replication stream brings data
// for its key, as Redis serves blocked clients after each command its
// master sends: the primary's engine writes, its feed streams to the
// replica's Follower, whose Stored hook is the replica engine's
// KeyStored. Before, the key filled and the client waited out its
// timeout; a replica promoted later kept the stale waiter.
func TestReplicatedWritesServeBlockedClients(t *testing.T) {
	// The primary: a registry whose changes go to a feed served on a bus.
	feed := repl.NewFeed(repl.FeedConfig{})
	preg := namespace.NewRegistry(namespace.RegistryConfig{Shards: 4, Observer: feed})
	pm, _ := repl.NewMetrics(nil, feed)
	prim := repl.NewPrimary(repl.PrimaryConfig{Feed: feed, Registry: preg, Metrics: pm, PingInterval: 20 * time.Millisecond})
	srv := &bus.Server{}
	prim.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() { cancel(); <-served })
	peng, err := command.New(command.Config{Registry: preg})
	if err != nil {
		t.Fatal(err)
	}

	// The replica: its engine serves the blocked clients of what its
	// follower applies.
	rreg := namespace.NewRegistry(namespace.RegistryConfig{Shards: 4})
	reng, err := command.New(command.Config{Registry: rreg})
	if err != nil {
		t.Fatal(err)
	}
	rm, _ := repl.NewMetrics(nil, nil)
	synced := make(chan bool, 4)
	fol := repl.NewFollower(repl.FollowerConfig{Registry: rreg, Metrics: rm, Stored: reng.KeyStored,
		MinBackoff: 5 * time.Millisecond, OnSynced: func(full bool) { synced <- full }})
	fol.Follow(t.Context(), lis.Addr().String())
	t.Cleanup(fol.Stop)
	select {
	case <-synced:
	case <-time.After(10 * time.Second):
		t.Fatal("the replica did not sync")
	}

	exec := func(e *command.Engine, s *command.Session, args ...string) string {
		var w resp.Writer
		bs := make([][]byte, len(args))
		for i, a := range args {
			bs[i] = []byte(a)
		}
		e.Exec(s, bs, &w)
		return string(w.Buf)
	}
	woken := make(chan struct{}, 1)
	waiter := reng.NewSession("waiter")
	waiter.CanBlock = true
	waiter.Wake = func() { woken <- struct{}{} }
	writer := peng.NewSession("writer")
	for _, c := range []struct {
		block, push []string
		want        string
	}{
		{[]string{"BLPOP", "q", "0"}, []string{"RPUSH", "q", "v"}, "*2\r\n$1\r\nq\r\n$1\r\nv\r\n"},
		{[]string{"BZPOPMIN", "other", "z", "0"}, []string{"ZADD", "z", "2", "m"}, "*3\r\n$1\r\nz\r\n$1\r\nm\r\n$1\r\n2\r\n"},
	} {
		if got := exec(reng, waiter, c.block...); got != "" || !waiter.Blocked() {
			t.Fatalf("%v on the replica = %q, want it blocked", c.block, got)
		}
		if got := exec(peng, writer, c.push...); got != ":1\r\n" {
			t.Fatalf("%v on the primary = %q", c.push, got)
		}
		select {
		case <-woken:
		case <-time.After(10 * time.Second):
			t.Fatalf("%v: not served after the primary's %v replicated", c.block, c.push)
		}
		var w resp.Writer
		reng.Unblock(waiter, &w)
		if got := string(w.Buf); got != c.want {
			t.Fatalf("%v served %q, want %q", c.block, got, c.want)
		}
	}
	if n := reng.BlockedClients(); n != 0 {
		t.Fatalf("%d blocked clients left", n)
	}
}
