// Package cachetest starts cache nodes in the test's own process, so the
// suites of other components (ratelimitsvc's bucket store) can run against
// cachenode as they run against redis-server: one node, or a cluster of
// nodes sharing a static slot map that go-redis's ClusterClient discovers
// with CLUSTER SLOTS. Nodes listen on loopback, in plaintext unless given
// certificate files (TLSNode), and stop when the test ends.
package cachetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode"
	"github.com/portico-io/portico/cachenode/slots"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlsfiles"
)

// startTimeout bounds a node's start.
const startTimeout = 10 * time.Second

// Node starts one standalone node and returns its RESP address.
func Node(t testing.TB) string {
	t.Helper()
	return run(t, cachenode.Config{RESPAddr: "127.0.0.1:0", NodeID: "cachetest"})
}

// TLSNode starts one standalone node serving RESP on TLS only, with the
// workload certificate files of files, and returns its RESP address.
func TLSNode(t testing.TB, files tlsfiles.Config) string {
	t.Helper()
	return run(t, cachenode.Config{RESPAddr: "127.0.0.1:0", NodeID: "cachetest", TLS: files})
}

// Cluster starts n primaries splitting the 16384 slots evenly, each the
// owner of a contiguous range, and returns their RESP addresses in slot
// order.
func Cluster(t testing.TB, n int) []string {
	t.Helper()
	if n < 1 {
		t.Fatalf("cachetest: a cluster of %d nodes", n)
	}
	ports := make([]int, n)
	bus := make([]int, n)
	var b strings.Builder
	b.WriteString("epoch: 1\nnodes:\n")
	for i := range ports {
		ports[i], bus[i] = testdeps.FreePort(t), testdeps.FreePort(t)
		lo, hi := i*slots.N/n, (i+1)*slots.N/n-1
		fmt.Fprintf(&b, "  - id: %040x\n    host: 127.0.0.1\n    port: %d\n    bus_port: %d\n    slots: [\"%d-%d\"]\n",
			0xc0+i, ports[i], bus[i], lo, hi)
	}
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := make([]string, n)
	for i := range ports {
		addrs[i] = run(t, cachenode.Config{RESPAddr: "127.0.0.1:" + strconv.Itoa(ports[i]), NodeID: fmt.Sprintf("%040x", 0xc0+i),
			ClusterConfig: path, BusAddr: "127.0.0.1:" + strconv.Itoa(bus[i])})
	}
	return addrs
}

// run starts a node with cfg until t ends and returns its RESP address.
func run(t testing.TB, cfg cachenode.Config) string {
	t.Helper()
	ready := make(chan cachenode.Addrs, 1)
	cfg.HTTPAddr, cfg.InsecurePlaintext, cfg.Ready = "127.0.0.1:0", !cfg.TLS.IsSet(), ready
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cachenode.Run(ctx, cfg) }()
	var addrs cachenode.Addrs
	select {
	case addrs = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("cachetest: cachenode.Run: %v", err)
	case <-time.After(startTimeout):
		cancel()
		t.Fatal("cachetest: cachenode did not start")
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("cachetest: cachenode.Run: %v", err)
		}
	})
	return addrs.RESP
}
