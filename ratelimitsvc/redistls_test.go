package ratelimitsvc_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlstest"
	"github.com/portico-io/portico/ratelimitsvc"
)

// A production Redis speaks TLS and asks for client certificates
// (redis-server's tls-auth-clients): ratelimitsvc verifies Redis against
// the CA given and presents its workload certificate, and its buckets live
// in that Redis (not in the local fallback of an outage).
func TestRedisOverTLS(t *testing.T) {
	ca := tlstest.New(t)
	server := ca.Files(t, identity.RateLimit, "redis") // SANs localhost and 127.0.0.1
	tlsPort := freePort(t)
	redis := testdeps.RedisServer(t, "--tls-port", strconv.Itoa(tlsPort),
		"--tls-cert-file", server.CertFile, "--tls-key-file", server.KeyFile, "--tls-ca-cert-file", server.CAFile)
	dir := t.TempDir()
	doc := "domain: tls\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2}\n"
	if err := os.WriteFile(filepath.Join(dir, "tls.yaml"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	prefix := "portico:redistls:" + strconv.FormatInt(time.Now().UnixNano(), 10) + ":"
	in := start(t, ratelimitsvc.Config{ConfigDir: dir, KeyPrefix: prefix, RedisTimeout: 2 * time.Second,
		RedisAddr: "127.0.0.1:" + strconv.Itoa(tlsPort), RedisTLS: true, RedisTLSCAFile: server.CAFile,
		TLS: ca.Files(t, identity.RateLimit, "ratelimitsvc")})
	gw := ca.Load(t, identity.Gateway, "gateway")
	conn, err := grpc.NewClient(in.addrs.GRPC, grpc.WithTransportCredentials(credentials.NewTLS(
		gw.ClientConfig(identity.Policy{Roles: []identity.Role{identity.RateLimit}}))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	in.client = rlsv3.NewRateLimitServiceClient(conn)

	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := in.check(t, "tls", "user", "ada"); got != want {
			t.Fatalf("request %d: %v, want %v", i+1, got, want)
		}
	}
	keys, err := redis.CLI("--scan", "--pattern", prefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(keys) == "" {
		t.Fatal("no bucket in Redis: the decisions came from the local fallback")
	}
}
