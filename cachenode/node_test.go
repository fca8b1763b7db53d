package cachenode_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/cachenode"
	"github.com/portico-io/portico/cachenode/expire"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlstest"
)

// clock is an injectable wall clock, advanced by tests instead of sleeping.
type clock struct{ ms atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ms.Store(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC).UnixMilli())
	return c
}
func (c *clock) Now() time.Time            { return time.UnixMilli(c.ms.Load()) }
func (c *clock) Advance(d time.Duration)   { c.ms.Add(d.Milliseconds()) }
func (c *clock) UnixMilli() int64          { return c.ms.Load() }
func (c *clock) Unix() int64               { return c.ms.Load() / 1000 }
func (c *clock) At(d time.Duration) int64  { return c.ms.Load() + d.Milliseconds() }
func (c *clock) AtSec(d time.Duration) int { return int((c.ms.Load() + d.Milliseconds()) / 1000) }

type node struct {
	addrs   cachenode.Addrs
	clock   *clock
	cycles  chan expire.Stats
	reloads chan error
	nsFile  string
	// tls is set for a node started withTLS: what n.client uses.
	tls   *tls.Config
	tlsOn bool
}

type nodeOpt func(*cachenode.Config, *node)

func withNamespaces(t *testing.T, yaml string) nodeOpt {
	return func(c *cachenode.Config, n *node) {
		n.nsFile = filepath.Join(t.TempDir(), "namespaces.yaml")
		if err := os.WriteFile(n.nsFile, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		c.NamespacesFile = n.nsFile
		c.ReloadInterval = 5 * time.Millisecond
	}
}

func withConfig(f func(*cachenode.Config)) nodeOpt {
	return func(c *cachenode.Config, _ *node) { f(c) }
}

// withTLS gives the node a cachenode certificate of the test's CA (named
// after its NodeID): RESP speaks TLS only, and in cluster mode the bus is
// mutual TLS between cachenode certificates, as in a real deployment.
// n.client then calls it with respClientTLS.
func withTLS() nodeOpt {
	return func(_ *cachenode.Config, n *node) { n.tlsOn = true }
}

var (
	nodeCAs     sync.Map // *testing.T → *tlstest.PKI
	respClients sync.Map // *testing.T → *tls.Config
)

// nodeCA is the CA of one test's nodes.
func nodeCA(t *testing.T) *tlstest.PKI {
	if p, ok := nodeCAs.Load(t); ok {
		return p.(*tlstest.PKI)
	}
	p := tlstest.New(t)
	nodeCAs.Store(t, p)
	t.Cleanup(func() { nodeCAs.Delete(t) })
	return p
}

// respClientTLS is a RESP client's configuration for the test's TLS nodes:
// it presents an operator certificate of nodeCA and checks that the node
// is a cachenode.
func respClientTLS(t *testing.T) *tls.Config {
	if c, ok := respClients.Load(t); ok {
		return c.(*tls.Config)
	}
	c := nodeCA(t).Load(t, identity.Operator, "test-client").ClientConfig(identity.Policy{Roles: []identity.Role{identity.CacheNode}})
	respClients.Store(t, c)
	t.Cleanup(func() { respClients.Delete(t) })
	return c
}

// startNode runs a node on loopback ports with an injected clock until the
// test ends.
func startNode(t *testing.T, opts ...nodeOpt) *node {
	t.Helper()
	n := &node{clock: newClock(), cycles: make(chan expire.Stats, 1), reloads: make(chan error, 1)}
	ready := make(chan cachenode.Addrs, 1)
	cfg := cachenode.Config{RESPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", NodeID: "test", Ready: ready,
		Now: n.clock.Now, Shards: 16,
		OnExpireCycle: func(s expire.Stats) {
			select {
			case n.cycles <- s:
			default:
			}
		},
		OnReload: func(applied bool, err error) {
			if !applied && err == nil {
				return
			}
			select {
			case n.reloads <- err:
			default:
			}
		}}
	for _, o := range opts {
		o(&cfg, n)
	}
	if n.tlsOn {
		cfg.TLS = nodeCA(t).Files(t, identity.CacheNode, cfg.NodeID)
		n.tls = respClientTLS(t)
	}
	// A node without certificate files starts only when plaintext is asked
	// for: the tests that are not about TLS ask for it here.
	cfg.InsecurePlaintext = !cfg.TLS.IsSet()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cachenode.Run(ctx, cfg) }()
	select {
	case n.addrs = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("cachenode.Run: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("cachenode did not start")
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("cachenode.Run: %v", err)
		}
	})
	return n
}

func (n *node) client(t *testing.T, mod ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: n.addrs.RESP, Protocol: 3, DisableIdentity: false, MaxRetries: -1, PoolSize: 8, TLSConfig: n.tls}
	for _, m := range mod {
		m(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// step is one command and its expected reply: a value (compared after
// go-redis decoding, with nil for a null) or an error string.
type step struct {
	args []any
	want any
	err  string
}

func do(args ...any) step { return step{args: args} }

func (s step) is(v any) step       { s.want = v; return s }
func (s step) fails(e string) step { s.err = e; return s }

func run(t *testing.T, c *redis.Client, steps []step) {
	t.Helper()
	for _, s := range steps {
		got, err := c.Do(ctx(t), s.args...).Result()
		if s.err != "" {
			if err == nil || err.Error() != s.err {
				t.Errorf("%v: err = %v, want %q", s.args, err, s.err)
			}
			continue
		}
		if errors.Is(err, redis.Nil) {
			got, err = nil, nil
		}
		if err != nil {
			t.Errorf("%v: unexpected error %v", s.args, err)
			continue
		}
		if !reflect.DeepEqual(norm(got), norm(s.want)) {
			t.Errorf("%v = %#v, want %#v", s.args, got, s.want)
		}
	}
}

// norm makes replies comparable: ints to int64, sets/arrays to []any.
func norm(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case []string:
		out := make([]any, len(x))
		for i, s := range x {
			out[i] = s
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = norm(e)
		}
		return out
	case map[any]any:
		out := map[any]any{}
		for k, e := range x {
			out[norm(k)] = norm(e)
		}
		return out
	}
	return v
}

func TestMain(m *testing.M) {
	os.Exit(m.Run())
}

var _ = fmt.Sprint

func stringsIndex(s, sub string) int { return strings.Index(s, sub) }

func ioReadFull(r *bufio.Reader, buf []byte) (int, error) { return io.ReadFull(r, buf) }

// TestRunRejectsBadNamespacesFile: a node does not start on a bad file, and
// frees its ports.
func TestRunRejectsBadNamespacesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ns.yaml")
	if err := os.WriteFile(path, []byte("namespaces:\n  a: {policy: sometimes}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := cachenode.Run(context.Background(), cachenode.Config{RESPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", NamespacesFile: path, InsecurePlaintext: true})
	if err == nil || !strings.Contains(err.Error(), "policy") {
		t.Fatalf("Run = %v, want the policy error", err)
	}
	if err := cachenode.Run(context.Background(), cachenode.Config{MaxMemory: -1}); err == nil {
		t.Fatal("negative MaxMemory accepted")
	}
}
