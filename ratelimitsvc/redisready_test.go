package ratelimitsvc_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/portico-io/portico/cachenode/cachetest"
	"github.com/portico-io/portico/internal/eventually"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlstest"
	"github.com/portico-io/portico/ratelimitsvc"
)

// readyz is GET /readyz's status and, when unready, the failed checks.
func (in *instance) readyz(t *testing.T) (int, map[string]string) {
	t.Helper()
	var body struct {
		Failed map[string]string `json:"failed"`
	}
	code := getJSON(t, "http://"+in.addrs.HTTP+"/readyz", &body)
	return code, body.Failed
}

// With RedisReadyAtStart a replica is not ready until its store has
// answered once; an outage after that leaves it ready (it decides by fail
// mode, as without the option).
func TestRedisReadyAtStart(t *testing.T) {
	store := testdeps.RedisServer(t)
	store.Kill()
	in := start(t, ratelimitsvc.Config{RedisAddr: store.Addr, RedisReadyAtStart: true, RedisTimeout: time.Second})
	if code, failed := in.readyz(t); code != 503 || failed["redis-answered"] == "" {
		t.Fatalf("store down at start: /readyz %d %v, want 503 naming redis-answered", code, failed)
	}
	store.Start()
	eventually.True(t, 10*time.Second, "ready once the store answers", func() bool { code, _ := in.readyz(t); return code == 200 })
	store.Kill()
	if code, failed := in.readyz(t); code != 200 {
		t.Fatalf("store down after it answered: /readyz %d %v, want 200", code, failed)
	}
}

// A cachenode is verified as a platform workload (role cachenode, against
// the TLS bundle, no host name) and shown ratelimitsvc's certificate; the
// buckets are in the node. A store presenting another role is refused, and
// readiness says so.
func TestCachenodeAsPlatformRedis(t *testing.T) {
	ca := tlstest.New(t)
	node := cachetest.TLSNode(t, ca.Files(t, identity.CacheNode, "cache-0"))
	dir := t.TempDir()
	doc := "domain: cache\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"
	if err := os.WriteFile(filepath.Join(dir, "cache.yaml"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	gw := ca.Load(t, identity.Gateway, "gateway")
	dial := func(in *instance) {
		conn, err := grpc.NewClient(in.addrs.GRPC, grpc.WithTransportCredentials(credentials.NewTLS(
			gw.ClientConfig(identity.Policy{Roles: []identity.Role{identity.RateLimit}}))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		in.client = rlsv3.NewRateLimitServiceClient(conn)
	}

	t.Run("WrongRole", func(t *testing.T) {
		in := start(t, ratelimitsvc.Config{ConfigDir: dir, RedisAddr: node, RedisTLSServerRole: identity.KVNode, RedisReadyAtStart: true,
			RedisTimeout: time.Second, TLS: ca.Files(t, identity.RateLimit, "ratelimitsvc")})
		code, failed := in.readyz(t)
		if code != 503 || !strings.Contains(failed["redis-answered"], "role cachenode may not call here") {
			t.Fatalf("/readyz %d %v, want 503: the node's role refused", code, failed)
		}
	})

	prefix := "portico:cachetls:" + strconv.FormatInt(time.Now().UnixNano(), 10) + ":"
	in := start(t, ratelimitsvc.Config{ConfigDir: dir, KeyPrefix: prefix, RedisAddr: node, RedisTLSServerRole: identity.CacheNode,
		RedisReadyAtStart: true, RedisTimeout: time.Second, TLS: ca.Files(t, identity.RateLimit, "ratelimitsvc")})
	eventually.True(t, 10*time.Second, "ready once the node answers", func() bool { code, _ := in.readyz(t); return code == 200 })
	dial(in)
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := in.check(t, "cache", "user", "ada"); got != want {
			t.Fatalf("request %d: %v, want %v", i+1, got, want)
		}
	}
	op := ca.Load(t, identity.Operator, "operator")
	c := redis.NewClient(&redis.Options{Addr: node, TLSConfig: op.ClientConfig(identity.Policy{Roles: []identity.Role{identity.CacheNode}})})
	defer c.Close()
	keys, err := c.Keys(context.Background(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatal("no bucket in the cachenode: the decisions came from the local fallback")
	}
}
