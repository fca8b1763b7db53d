// Command ratelimitsvc runs Portico's Envoy rate-limit service: gRPC
// RateLimitService on :18200, metrics/health/config on :18201.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/portico-io/portico/internal/envflag"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/logging"
	"github.com/portico-io/portico/internal/tlsfiles"
	"github.com/portico-io/portico/internal/tracing"
	"github.com/portico-io/portico/internal/xdsclient"
	"github.com/portico-io/portico/ratelimitsvc"
	"github.com/portico-io/portico/ratelimitsvc/bucket"
	"github.com/portico-io/portico/ratelimitsvc/source"
)

func main() {
	fs := flag.NewFlagSet("ratelimitsvc", flag.ExitOnError)
	var cfg ratelimitsvc.Config
	grpcAddr := envflag.String(fs, "grpc-addr", "PORTICO_RATELIMIT_GRPC_ADDR", ratelimitsvc.DefaultGRPCAddr, "gRPC RateLimitService listen address")
	httpAddr := envflag.String(fs, "http-addr", "PORTICO_RATELIMIT_HTTP_ADDR", ratelimitsvc.DefaultHTTPAddr, "HTTP metrics/health/config listen address")
	redisAddr := envflag.String(fs, "redis-addr", "PORTICO_REDIS_ADDR", "", "Redis host:port (comma-separated for a cluster); empty = in-memory buckets")
	redisMaster := envflag.String(fs, "redis-master-name", "PORTICO_REDIS_MASTER_NAME", "", "Sentinel master name (redis-addr then lists the Sentinels)")
	redisCluster := envflag.Bool(fs, "redis-cluster", "PORTICO_REDIS_CLUSTER", false, "Redis Cluster even with a single seed address")
	redisUser := envflag.String(fs, "redis-username", "PORTICO_REDIS_USERNAME", "", "Redis ACL user")
	// Passwords come from the environment only: a flag would show in ps.
	redisPassword, sentinelPassword := os.Getenv("PORTICO_REDIS_PASSWORD"), os.Getenv("PORTICO_REDIS_SENTINEL_PASSWORD")
	redisTimeout := envflag.Duration(fs, "redis-timeout", "PORTICO_REDIS_TIMEOUT", bucket.DefaultTimeout, "hard timeout per Redis call")
	replicas := envflag.Uint(fs, "replicas", "PORTICO_RATELIMIT_REPLICAS", 0, "replicas sharing the limits: degraded-mode local buckets get limit/replicas; 0 = count the live replicas through Redis")
	configDir := envflag.String(fs, "config-dir", "PORTICO_RATELIMIT_CONFIG_DIR", "", "directory of envoyproxy/ratelimit YAML rule files")
	poll := envflag.Duration(fs, "config-poll", "PORTICO_RATELIMIT_CONFIG_POLL", source.DefaultPollInterval, "how often to look for changed rule files")
	xdsAddr := envflag.String(fs, "xds-addr", "PORTICO_XDS_ADDR", "", "control plane xDS address; empty = file rules only")
	xdsType := envflag.String(fs, "xds-type", "PORTICO_RATELIMIT_XDS_TYPE", source.RuleType, "xDS type to subscribe to: "+source.RuleType+" or "+source.ConfigType)
	nodeID := envflag.String(fs, "node-id", "PORTICO_NODE_ID", "", "xDS node id (default ratelimitsvc-<host>-<pid>)")
	stateDir := envflag.String(fs, "state-dir", "PORTICO_RATELIMIT_STATE_DIR", ratelimitsvc.DefaultStateDir, "directory for the last good xDS rules")
	maxRecv := envflag.Uint(fs, "xds-max-recv-msg-bytes", "PORTICO_XDS_MAX_RECV_MSG_BYTES", xdsclient.DefaultMaxRecvMsgBytes, "largest xDS response accepted")
	staleAfter := envflag.Duration(fs, "xds-stale-after", "PORTICO_XDS_STALE_AFTER", xdsclient.DefaultStaleAfter, "how long xDS rules may be out of sync with the control plane before /readyz fails (limits continue on the last good rules)")
	protocol := envflag.String(fs, "xds-protocol", "PORTICO_XDS_PROTOCOL", xdsclient.ProtocolDelta, "xDS protocol: delta (incremental: only changed rules are sent) or sotw (state of the world)")
	logFormat := envflag.String(fs, "log-format", "PORTICO_LOG_FORMAT", "json", "log format: json or text")
	logLevel := envflag.String(fs, "log-level", "PORTICO_LOG_LEVEL", "info", "log level")
	tlsFlags := tlsfiles.RegisterFlags(fs)
	traceFlags := tracing.RegisterFlags(fs, ratelimitsvc.ServiceName)
	redisTLS := envflag.Bool(fs, "redis-tls", "PORTICO_REDIS_TLS", false, "connect to Redis over TLS (presenting this workload's certificate when asked)")
	redisCA := envflag.String(fs, "redis-tls-ca-file", "PORTICO_REDIS_TLS_CA_FILE", "", "CA bundle Redis's certificate must chain to (default: the system's roots)")
	redisRole := envflag.String(fs, "redis-tls-server-role", "PORTICO_REDIS_TLS_SERVER_ROLE", "", "verify Redis as a platform workload of this role (cachenode for Portico's cache) against the --tls-ca-file bundle, not a host name; implies --redis-tls")
	redisReady := envflag.Bool(fs, "redis-ready-at-start", "PORTICO_REDIS_READY_AT_START", false, "/readyz fails until Redis (every Cluster primary) has answered once; an outage after that never makes it unready")
	plaintext := envflag.Bool(fs, "insecure-plaintext", "PORTICO_INSECURE_PLAINTEXT", false, "talk to a plaintext control plane (debugging only)")
	_ = fs.Parse(os.Args[1:])

	log, err := logging.New(os.Stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.RedisAddr, cfg.RedisTimeout = *grpcAddr, *httpAddr, *redisAddr, *redisTimeout
	cfg.ConfigDir, cfg.PollInterval, cfg.XDSAddr, cfg.XDSType, cfg.NodeID, cfg.StateDir = *configDir, *poll, *xdsAddr, *xdsType, *nodeID, *stateDir
	cfg.Replicas, cfg.XDSMaxRecvMsgBytes, cfg.XDSStaleAfter, cfg.XDSProtocol = int(*replicas), int(*maxRecv), *staleAfter, *protocol
	cfg.RedisMasterName, cfg.RedisCluster, cfg.RedisUsername = *redisMaster, *redisCluster, *redisUser
	cfg.RedisPassword, cfg.RedisSentinelPassword = redisPassword, sentinelPassword
	cfg.Logger = log
	cfg.TLS, cfg.InsecurePlaintext, cfg.Tracing = tlsFlags.Config(), *plaintext, traceFlags.Config()
	cfg.RedisTLS, cfg.RedisTLSCAFile, cfg.RedisTLSServerRole, cfg.RedisReadyAtStart = *redisTLS, *redisCA, identity.Role(*redisRole), *redisReady

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := ratelimitsvc.Run(ctx, cfg); err != nil {
		log.Error("ratelimitsvc: exiting", "err", err)
		os.Exit(1)
	}
}
