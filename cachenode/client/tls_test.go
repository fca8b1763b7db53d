package client

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlstest"
)

// TestClientOverTLS: with Options.TLS the client New builds reaches nodes
// that serve RESP over TLS only (a one-node cluster): a miss is loaded and
// filled, the next Get is a hit. Without it the cache is unreachable and
// every Get falls back to the loader.
func TestClientOverTLS(t *testing.T) {
	p := tlstest.New(t)
	port := freePort(t)
	id := fmt.Sprintf("%040x", 0xc0)
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	doc := fmt.Sprintf("epoch: 1\nnodes:\n  - id: %s\n    host: 127.0.0.1\n    port: %d\n    bus_port: %d\n    slots: [\"0-16383\"]\n", id, port, freePort(t))
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	node := startNode(t, cachenode.Config{RESPAddr: fmt.Sprintf("127.0.0.1:%d", port), NodeID: id, ClusterConfig: path,
		TLS: p.Files(t, identity.CacheNode, id)})
	app := p.Load(t, identity.Gateway, "app").ClientConfig(identity.Policy{Roles: []identity.Role{identity.CacheNode}})
	var loads atomic.Int32
	loader := func(context.Context) ([]byte, int64, error) { loads.Add(1); return []byte("v"), 1, nil }
	ctx := testCtx(t)

	c := newClient(t, Options{Addrs: []string{node.addr}, TLS: app, NoReplicaRetry: true, Timeout: time.Second})
	for range 2 {
		if v, err := c.Get(ctx, "k", loader); err != nil || string(v) != "v" {
			t.Fatalf("Get over TLS = %q, %v", v, err)
		}
	}
	if n := loads.Load(); n != 1 {
		t.Fatalf("loader called %d times over TLS, want 1 (the second Get a hit)", n)
	}
	plain := newClient(t, Options{Addrs: []string{node.addr}, NoReplicaRetry: true, Timeout: 200 * time.Millisecond})
	if _, err := plain.Get(ctx, "k", loader); err != nil {
		t.Fatalf("Get without TLS (loader fallback): %v", err)
	}
	if n := loads.Load(); n != 2 {
		t.Fatalf("a client without TLS got the cached value (loader calls %d)", n)
	}
}
