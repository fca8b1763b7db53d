package topology_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode/topology"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlstest"
)

// kvnode's /v1/cp/ API over TLS, played by fakeKV behind a server with a
// kvnode certificate that takes client certificates optionally, as
// kvnode's API port does: a client with TLS set calls https on addresses
// without a scheme (the leader named by a 503 included), presents its
// cachenode certificate, and refuses a server that is not a kvnode.
func TestClientOverTLS(t *testing.T) {
	p := tlstest.New(t)
	kvFiles := p.Load(t, identity.KVNode, "kv-0")
	node := p.Load(t, identity.CacheNode, "cache-0").ClientConfig(identity.Policy{Roles: []identity.Role{identity.KVNode}})
	var (
		mu   sync.Mutex
		seen []string // the client identities the kvnodes saw
	)
	record := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, err := identity.FromConnState(r.TLS)
			mu.Lock()
			if err != nil {
				seen = append(seen, "none")
			} else {
				seen = append(seen, string(id.Role))
			}
			mu.Unlock()
			h.ServeHTTP(w, r)
		})
	}
	kv := &fakeKV{}
	leader := httptest.NewUnstartedServer(record(kv))
	leader.TLS = kvFiles.APIServerConfig()
	leader.StartTLS()
	defer leader.Close()
	leaderAddr := strings.TrimPrefix(leader.URL, "https://")
	follower := httptest.NewUnstartedServer(record(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-KV-Leader-Http-Addr", leaderAddr)
		w.WriteHeader(http.StatusServiceUnavailable)
	})))
	follower.TLS = kvFiles.APIServerConfig()
	follower.StartTLS()
	defer follower.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := &topology.Client{Addrs: []string{strings.TrimPrefix(follower.URL, "https://")}, Cluster: "x", TLS: node}
	rev, err := c.Publish(ctx, spec(1, "0-16383"), 0)
	if err != nil {
		t.Fatalf("Publish over TLS through the leader hint: %v", err)
	}
	if got, err := c.Load(ctx); err != nil || got.Revision != rev {
		t.Fatalf("Load over TLS = %+v, %v", got, err)
	}
	// Watches do not follow leader hints: watch the leader.
	w := &topology.Client{Addrs: []string{leaderAddr}, Cluster: "x", TLS: node}
	connected := make(chan string, 1)
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- w.Watch(wctx, rev+1, func(topology.Update) error { return nil }, topology.WatchHooks{Connected: func(addr string) {
			select {
			case connected <- addr:
			default:
			}
		}})
	}()
	select {
	case <-connected:
	case <-time.After(5 * time.Second):
		t.Fatal("no watch stream over TLS")
	}
	wcancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	for _, role := range seen {
		if role != string(identity.CacheNode) {
			t.Errorf("a kvnode saw client identity %q, want every request from the cachenode certificate", role)
		}
	}
	if len(seen) < 4 {
		t.Errorf("the kvnodes saw %d requests", len(seen))
	}
	mu.Unlock()

	// A server with another role's certificate is not kvnode: refused.
	impostor := httptest.NewUnstartedServer(kv)
	impostor.TLS = p.Load(t, identity.CacheNode, "impostor").APIServerConfig()
	impostor.StartTLS()
	defer impostor.Close()
	bad := &topology.Client{Addrs: []string{strings.TrimPrefix(impostor.URL, "https://")}, Cluster: "x", TLS: node}
	if _, err := bad.Load(ctx); !errors.Is(err, topology.ErrUnavailable) || !strings.Contains(err.Error(), "kvnode") {
		t.Fatalf("a server without a kvnode identity: %v", err)
	}
	// Without TLS the same address is called over plain HTTP: refused.
	plain := &topology.Client{Addrs: []string{leaderAddr}, Cluster: "x"}
	if _, err := plain.Load(ctx); err == nil {
		t.Fatalf("plain HTTP to a TLS kvnode: %v", err)
	}
	// An explicit scheme wins over TLS: http:// stays plain.
	plainKV := httptest.NewServer(kv)
	defer plainKV.Close()
	explicit := &topology.Client{Addrs: []string{plainKV.URL}, Cluster: "x", TLS: node}
	if got, err := explicit.Load(ctx); err != nil || got.Revision != rev {
		t.Fatalf("Load from an http:// address with TLS set = %+v, %v", got, err)
	}
}
