package repl

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode/bus"
	"github.com/portico-io/portico/cachenode/keyspace"
	"github.com/portico-io/portico/cachenode/namespace"
	"github.com/prometheus/client_golang/prometheus"
)

// testClock is the wall clock both sides of a test share, advanced by hand.
type testClock struct{ ms atomic.Int64 }

func (c *testClock) now() int64 { return c.ms.Load() }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// node is one cache node's replication stack over a real registry.
type node struct {
	reg     *namespace.Registry
	feed    *Feed
	prim    *Primary
	fol     *Follower
	bus     string // bus address
	m       *Metrics
	prom    *prometheus.Registry
	synced  chan bool  // OnSynced
	applied chan int64 // OnApplied, latest values (lossy)
}

type nodeOpts struct {
	backlog int
	secret  string
}

func newNode(t *testing.T, clk *testClock, o nodeOpts, namespaces ...string) *node {
	t.Helper()
	n := &node{feed: NewFeed(FeedConfig{BacklogBytes: o.backlog}), prom: prometheus.NewRegistry(),
		synced: make(chan bool, 16), applied: make(chan int64, 1)}
	var err error
	if n.m, err = NewMetrics(n.prom, n.feed); err != nil {
		t.Fatal(err)
	}
	n.reg = namespace.NewRegistry(namespace.RegistryConfig{Shards: 16, Now: clk.now, Observer: n.feed})
	set := []namespace.Settings{}
	for _, name := range namespaces {
		set = append(set, namespace.Settings{Name: name})
	}
	if err := n.reg.Apply(set); err != nil {
		t.Fatal(err)
	}
	n.prim = NewPrimary(PrimaryConfig{Feed: n.feed, Registry: n.reg, Logger: quiet, Metrics: n.m,
		PingInterval: 20 * time.Millisecond, Timeout: 5 * time.Second})
	srv := &bus.Server{Secret: o.secret, Logger: quiet}
	n.prim.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n.bus = lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	n.fol = NewFollower(FollowerConfig{Registry: n.reg, Bus: bus.Peer{Secret: o.secret}, Announce: "127.0.0.1:7001", Logger: quiet, Metrics: n.m,
		Timeout: 5 * time.Second, AckInterval: 10 * time.Millisecond, MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		OnSynced: func(full bool) { n.synced <- full },
		OnApplied: func(off int64) {
			select {
			case <-n.applied:
			default:
			}
			n.applied <- off
		}})
	t.Cleanup(func() {
		n.fol.Stop()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("bus Serve: %v", err)
		}
	})
	return n
}

// waitSynced waits for the next OnSynced and checks its kind.
func (n *node) waitSynced(t *testing.T, full bool) {
	t.Helper()
	select {
	case got := <-n.synced:
		if got != full {
			t.Fatalf("synced full=%v, want full=%v", got, full)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no sync (want full=%v); status %+v", full, n.fol.Status())
	}
}

// waitCaughtUp waits until the replica has applied everything the
// primary logged so far.
func (n *node) waitCaughtUp(t *testing.T, primary *node) {
	t.Helper()
	want := primary.feed.Offset()
	deadline := time.After(10 * time.Second)
	for {
		if n.fol.Status().Offset >= want && n.fol.Status().LinkUp {
			return
		}
		select {
		case <-n.applied:
		case <-deadline:
			t.Fatalf("replica at %+v, primary at %d", n.fol.Status(), want)
		}
	}
}

func (n *node) db(t *testing.T, name string) *keyspace.DB {
	t.Helper()
	ns, err := n.reg.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return ns.DB
}

// write runs f on key in namespace ns inside a Txn, as a command would.
func (n *node) write(t *testing.T, ns, key string, f func(tx *keyspace.Txn, k []byte)) {
	t.Helper()
	db := n.db(t, ns)
	var tx keyspace.Txn
	k := []byte(key)
	db.Begin(&tx, [][]byte{k})
	f(&tx, k)
	tx.End()
}

func describe(e *keyspace.Entry) string {
	var items []string
	switch e.Kind() {
	case keyspace.KindString:
		items = []string{string(e.Str)}
	case keyspace.KindList:
		for i := 0; i < e.Obj.List.Len(); i++ {
			items = append(items, string(e.Obj.List.At(i)))
		}
	case keyspace.KindSet:
		items = slices.Sorted(maps.Keys(e.Obj.Set))
	case keyspace.KindHash:
		for f, v := range e.Obj.HashAll() {
			items = append(items, f+"="+string(v))
		}
		slices.Sort(items)
	case keyspace.KindZset:
		for n := e.Obj.Zset.First(); n != nil; n = n.Next() {
			items = append(items, fmt.Sprintf("%s=%v", n.Member(), n.Score()))
		}
	}
	for i, it := range items {
		if len(it) > 64 { // keep big values cheap to compare and print
			items[i] = fmt.Sprintf("%d bytes sha256 %x", len(it), sha256.Sum256([]byte(it)))
		}
	}
	return fmt.Sprintf("%s exp=%d %q", e.Kind(), e.ExpireAt(), items)
}

// state is every live key of every namespace, described.
func (n *node) state() map[string]string {
	out := map[string]string{}
	for _, ns := range n.reg.All() {
		for i := range ns.DB.NumShards() {
			ns.DB.ViewShard(i, func(entries iter.Seq2[string, *keyspace.Entry]) {
				for k, e := range entries {
					out[ns.Name+"/"+k] = describe(e)
				}
			})
		}
	}
	return out
}

func sameState(t *testing.T, primary, replica *node) {
	t.Helper()
	p, r := primary.state(), replica.state()
	if maps.Equal(p, r) {
		return
	}
	diff := 0
	for k, v := range p {
		if r[k] != v && diff < 10 {
			t.Errorf("%s: primary %.120s, replica %.120s", k, v, r[k])
			diff++
		}
	}
	for k, v := range r {
		if _, ok := p[k]; !ok && diff < 10 {
			t.Errorf("%s: only on the replica: %.120s", k, v)
			diff++
		}
	}
	t.Fatalf("replica (%d keys) differs from primary (%d keys)", len(r), len(p))
}

// proxy forwards TCP to target until cut; cut drops every connection
// (a network failure) and keeps accepting new ones.
type proxy struct {
	addr   string
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	gate   chan struct{} // non-nil: upstream→client copying waits for it to close
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{addr: lis.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		lis.Close()
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.resume()
		p.cut()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				c.Close()
				u.Close()
				return
			}
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(u, c); u.Close(); c.Close() }()
			go func() { defer wg.Done(); p.copyGated(c, u); u.Close(); c.Close() }()
		}
	}()
	return p
}

// pause stops forwarding what the primary sends (a replica that stops
// reading); resume lets it through again.
func (p *proxy) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate == nil {
		p.gate = make(chan struct{})
	}
}

func (p *proxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
}

func (p *proxy) copyGated(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		p.mu.Lock()
		gate := p.gate
		p.mu.Unlock()
		if gate != nil {
			<-gate
		}
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
