package client

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/cachenode"

	"github.com/portico-io/portico/internal/testdeps"
)

// testNode is an in-process cachenode that a test can stop and start
// again on the same address (the minimal startup of cachenode's own
// tests, which live in package cachenode_test).
type testNode struct {
	tb     testing.TB
	cfg    cachenode.Config
	addr   string
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan error
}

func startNode(tb testing.TB, cfg cachenode.Config) *testNode {
	tb.Helper()
	n, err := tryStartNode(tb, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

func tryStartNode(tb testing.TB, cfg cachenode.Config) (*testNode, error) {
	if cfg.RESPAddr == "" {
		cfg.RESPAddr = "127.0.0.1:0"
	}
	cfg.HTTPAddr = "127.0.0.1:0"
	if cfg.NodeID == "" {
		cfg.NodeID = "test"
	}
	if cfg.Shards == 0 {
		cfg.Shards = 16
	}
	// Nodes refuse to start without TLS files or an explicit plaintext.
	cfg.InsecurePlaintext = !cfg.TLS.IsSet()
	n := &testNode{tb: tb, cfg: cfg}
	if err := n.tryStart(); err != nil {
		return nil, err
	}
	tb.Cleanup(n.stop)
	return n, nil
}

func (n *testNode) start() {
	n.tb.Helper()
	if err := n.tryStart(); err != nil {
		n.tb.Fatal(err)
	}
}

func (n *testNode) tryStart() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	ready := make(chan cachenode.Addrs, 1)
	cfg := n.cfg
	cfg.Ready = ready
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cachenode.Run(ctx, cfg) }()
	select {
	case a := <-ready:
		n.addr = a.RESP
		n.cfg.RESPAddr = a.RESP // a restart comes back on the same port
	case err := <-done:
		cancel()
		return fmt.Errorf("cachenode.Run: %w", err)
	case <-time.After(10 * time.Second):
		cancel()
		return fmt.Errorf("cachenode did not start")
	}
	n.cancel, n.done = cancel, done
	return nil
}

// stop ends the node and waits for it; a no-op when stopped.
func (n *testNode) stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cancel == nil {
		return
	}
	n.cancel()
	if err := <-n.done; err != nil {
		n.tb.Errorf("cachenode.Run: %v", err)
	}
	n.cancel = nil
}

// plainClient is a go-redis client of one node, with the per-call
// deadline honoured as Options.Client requires.
func plainClient(tb testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, PoolSize: 16,
		DialTimeout: 200 * time.Millisecond})
	tb.Cleanup(func() { c.Close() })
	return c
}

func freePort(tb testing.TB) int { return testdeps.FreePort(tb) }

// startCluster runs three primaries with a static slot map
// (0-5460/5461-10922/10923-16383) and explicit bus ports, and with
// replicas one replica of each (nodes 3, 4, 5 follow 0, 1, 2).
func startCluster(tb testing.TB) (nodes []*testNode, addrs []string) {
	return startClusterN(tb, false)
}

// startClusterN retries with new ports when one was taken between picking
// it and binding it (other tests run on the machine).
func startClusterN(tb testing.TB, replicas bool) (nodes []*testNode, addrs []string) {
	tb.Helper()
	var err error
	for range 5 {
		if nodes, addrs, err = tryCluster(tb, replicas); err == nil {
			return nodes, addrs
		}
		tb.Logf("cluster start: %v; retrying with new ports", err)
	}
	tb.Fatal(err)
	return nil, nil
}

func tryCluster(tb testing.TB, replicas bool) (nodes []*testNode, addrs []string, err error) {
	ranges := []string{"0-5460", "5461-10922", "10923-16383"}
	n := 3
	if replicas {
		n = 6
	}
	var ports []int
	for range n {
		ports = append(ports, freePort(tb))
	}
	id := func(i int) string { return fmt.Sprintf("%040x", 0xa0+i) }
	var b strings.Builder
	b.WriteString("epoch: 1\nnodes:\n")
	for i, p := range ports {
		fmt.Fprintf(&b, "  - id: %s\n    host: 127.0.0.1\n    port: %d\n    bus_port: %d\n", id(i), p, freePort(tb))
		if i < 3 {
			fmt.Fprintf(&b, "    slots: [%q]\n", ranges[i])
		} else {
			fmt.Fprintf(&b, "    replica_of: %s\n", id(i-3))
		}
	}
	path := filepath.Join(tb.TempDir(), "cluster.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	for i, p := range ports {
		n, err := tryStartNode(tb, cachenode.Config{RESPAddr: fmt.Sprintf("127.0.0.1:%d", p), NodeID: id(i),
			ClusterConfig: path, ReloadInterval: time.Second})
		if err != nil {
			for _, n := range nodes {
				n.stop()
			}
			return nil, nil, err
		}
		nodes = append(nodes, n)
		addrs = append(addrs, n.addr)
	}
	return nodes, addrs, nil
}

// dropProxy forwards TCP to target; while dropping, it discards what
// clients send, so their reads time out (a stuck primary).
type dropProxy struct {
	ln       net.Listener
	target   string
	dropping atomic.Bool
}

func newDropProxy(tb testing.TB, target string) *dropProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &dropProxy{ln: ln, target: target}
	var wg sync.WaitGroup
	var conns sync.Map
	tb.Cleanup(func() {
		ln.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			conns.Store(c, nil)
			conns.Store(up, nil)
			wg.Add(2)
			go func() {
				defer wg.Done()
				defer up.Close()
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 && !p.dropping.Load() {
						if _, werr := up.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(c, up)
			}()
		}
	}()
	return p
}

func (p *dropProxy) addr() string { return p.ln.Addr().String() }

// quietLogger drops go-redis's own log lines (dial failures while a test
// has a node stopped on purpose).
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	os.Exit(m.Run())
}
