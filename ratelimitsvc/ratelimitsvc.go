// Package ratelimitsvc runs Portico's rate-limit service: Envoy's
// RateLimitService v3 over gRPC (:18200, with gRPC health) and an HTTP
// server (:18201) for /metrics, /healthz, /readyz and GET /config. Rules
// come from envoyproxy/ratelimit YAML files and from the control plane over
// xDS; buckets live in Redis, or in memory when no Redis is configured.
package ratelimitsvc

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/portico-io/portico/internal/grpcserver"
	"github.com/portico-io/portico/internal/health"
	"github.com/portico-io/portico/internal/httpserver"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlsfiles"
	"github.com/portico-io/portico/internal/tracing"
	"github.com/portico-io/portico/internal/xdsclient"
	"github.com/portico-io/portico/ratelimitsvc/bucket"
	"github.com/portico-io/portico/ratelimitsvc/peers"
	"github.com/portico-io/portico/ratelimitsvc/rules"
	"github.com/portico-io/portico/ratelimitsvc/service"
	"github.com/portico-io/portico/ratelimitsvc/source"
	"github.com/portico-io/portico/ratelimitsvc/throttle"
)

// Defaults (ARCHITECTURE.md ports).
const (
	ServiceName     = "portico-ratelimitsvc" // service.name of its spans
	DefaultGRPCAddr = "127.0.0.1:18200"
	DefaultHTTPAddr = "127.0.0.1:18201"
	DefaultStateDir = ".run/ratelimitsvc"
)

// Config configures Run. Zero values take defaults.
type Config struct {
	GRPCAddr string
	HTTPAddr string
	// RedisAddr is host:port (comma-separated for a cluster, or the
	// Sentinels when RedisMasterName is set); empty uses the in-memory store.
	RedisAddr string
	// RedisMasterName selects Sentinel (the monitored master's name).
	RedisMasterName string
	// RedisCluster forces Cluster mode with a single seed address.
	RedisCluster bool
	// RedisUsername, RedisPassword and RedisSentinelPassword authenticate.
	RedisUsername, RedisPassword, RedisSentinelPassword string
	// RedisTLS connects to Redis over TLS, verifying its certificate
	// against RedisTLSCAFile (default: the system's roots) and presenting
	// this workload's certificate (TLS) when Redis asks for one.
	RedisTLS       bool
	RedisTLSCAFile string
	// RedisTLSServerRole, when set (identity.CacheNode for Portico's cache
	// cluster), verifies Redis as a platform workload instead: its chain
	// against TLS's CA bundle (reloaded with the other files) and its SPIFFE
	// ID against this role, not a host name. It implies RedisTLS, needs the
	// TLS files and excludes RedisTLSCAFile.
	RedisTLSServerRole identity.Role
	// RedisReadyAtStart makes /readyz fail until Redis has answered once
	// (a PING, on a Cluster one to every primary): a replica whose store
	// address, TLS or credentials are wrong never becomes ready, instead of
	// deciding on local buckets. Once it has answered, an outage does not
	// make the replica unready (see Run).
	RedisReadyAtStart bool
	// RedisTimeout bounds each Redis call (default bucket.DefaultTimeout).
	RedisTimeout time.Duration
	// Replicas is how many ratelimitsvc replicas share the limits: in
	// degraded mode failMode=OPEN rules get limit/Replicas locally. 0 (the
	// default) counts them: with Redis, every replica renews a membership
	// entry there each second (package peers) and the live count — the
	// last one seen before an outage — is used; without Redis, 1.
	Replicas int
	// ConfigDir holds envoyproxy/ratelimit YAML files; empty disables them.
	ConfigDir    string
	PollInterval time.Duration
	// XDSAddr is the control plane's xDS address; empty disables xDS.
	XDSAddr string
	// XDSType is source.RuleType (default: Portico's rules, with burst,
	// token buckets, tenants) or source.ConfigType (the standard
	// RateLimitConfig, fixed windows as in envoyproxy/ratelimit).
	XDSType string
	// XDSMaxRecvMsgBytes bounds one xDS response (default
	// xdsclient.DefaultMaxRecvMsgBytes).
	XDSMaxRecvMsgBytes int
	// XDSStaleAfter is how long the xDS rules may be out of sync with the
	// control plane before /readyz fails (default
	// xdsclient.DefaultStaleAfter); a response that cannot be received
	// fails it at once. Limits continue on the last good rules.
	XDSStaleAfter time.Duration
	// XDSProtocol is xdsclient.ProtocolDelta (default) or ProtocolSotW.
	XDSProtocol string
	// NodeID identifies this replica to the control plane (default
	// ratelimitsvc-<hostname>-<pid>).
	NodeID string
	// StateDir keeps the last good xDS rules (default DefaultStateDir).
	StateDir string
	// TLS names this workload's certificate files (role ratelimit): the
	// rate-limit port admits gateway identities only, and the xDS client
	// presents it. Without files, InsecurePlaintext must be set.
	TLS               tlsfiles.Config
	InsecurePlaintext bool
	KeyPrefix         string
	// ThrottleSink receives throttle events (default: one log line each);
	// ThrottleQueue bounds the queue in front of it (default
	// throttle.DefaultSize). A full queue drops and counts events.
	ThrottleSink  throttle.Sink
	ThrottleQueue int
	// Tracing exports a span per ShouldRateLimit to an OTLP collector; off
	// without Tracing.Endpoint. ServiceName defaults to ServiceName,
	// InstanceID to NodeID; the collector is shown TLS's certificate when
	// it asks.
	Tracing  tracing.Config
	Logger   *slog.Logger
	Registry *prometheus.Registry
	// Ready, when set, receives the listening addresses once both servers
	// listen (a test hook).
	Ready chan<- Addrs
}

// Addrs are the addresses the servers actually listen on.
type Addrs struct{ GRPC, HTTP string }

func (c *Config) defaults() {
	if c.GRPCAddr == "" {
		c.GRPCAddr = DefaultGRPCAddr
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if c.NodeID == "" {
		h, _ := os.Hostname()
		c.NodeID = fmt.Sprintf("ratelimitsvc-%s-%d", h, os.Getpid())
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
		c.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
}

// redisTLSConfig is the TLS client configuration for Redis, nil without
// RedisTLS or RedisTLSServerRole.
func redisTLSConfig(cfg Config, files *tlsfiles.Files) (*tls.Config, error) {
	if role := cfg.RedisTLSServerRole; role != "" {
		switch {
		case !role.Valid():
			return nil, fmt.Errorf("%w: Redis TLS server role %q is not a role (%v)", ErrConfig, role, identity.Roles)
		case cfg.RedisTLSCAFile != "":
			return nil, fmt.Errorf("%w: a Redis TLS server role verifies against the TLS CA bundle; drop the Redis CA file", ErrConfig)
		case files == nil:
			return nil, fmt.Errorf("%w: a Redis TLS server role needs this workload's TLS files", ErrConfig)
		}
		return files.ClientConfig(identity.Policy{Roles: []identity.Role{role}}), nil
	}
	if !cfg.RedisTLS {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.RedisTLSCAFile != "" {
		pem, err := os.ReadFile(cfg.RedisTLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: Redis CA: %w", ErrConfig, err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: Redis CA %s holds no PEM certificate", ErrConfig, cfg.RedisTLSCAFile)
		}
	}
	if files != nil {
		c.GetClientCertificate = files.GetClientCertificate
	}
	return c, nil
}

// answeredOnce is the readiness check of RedisReadyAtStart: it fails
// until prepare (bucket.Redis.Prepare: the scripts loaded on every
// primary) has succeeded once, and passes from then on, whatever Redis
// does later (fail modes answer an outage).
func answeredOnce(prepare func(context.Context) error) health.Check {
	var answered atomic.Bool
	return func(ctx context.Context) error {
		if answered.Load() {
			return nil
		}
		if err := prepare(ctx); err != nil {
			return fmt.Errorf("no answer yet: %w", err)
		}
		answered.Store(true)
		return nil
	}
}

// ErrConfig is a Config Run cannot serve with.
var ErrConfig = errors.New("ratelimitsvc: bad config")

// Run serves until ctx is done.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	if t := cfg.XDSType; t != "" && t != source.RuleType && t != source.ConfigType {
		return fmt.Errorf("ratelimitsvc: XDSType %q: want %s or %s", t, source.RuleType, source.ConfigType)
	}
	log := cfg.Logger
	tc := cfg.TLS
	tc.Registerer, tc.MetricPrefix, tc.Logger = cfg.Registry, "portico_ratelimitsvc", log
	tlsFiles, err := tlsfiles.LoadOrPlaintext(tc, cfg.InsecurePlaintext,
		"ratelimitsvc: PLAINTEXT: any process that reaches the rate-limit port can spend any consumer's budget; use only for debugging")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	trc := cfg.Tracing
	trc.ServiceName, trc.InstanceID = cmp.Or(trc.ServiceName, ServiceName), cmp.Or(trc.InstanceID, cfg.NodeID)
	trc.Workload, trc.Logger, trc.Registerer, trc.MetricPrefix = tlsFiles, log, cfg.Registry, "portico_ratelimitsvc"
	tracer, err := tracing.New(ctx, trc)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	defer func() { _ = tracer.Shutdown(ctx) }() // after the server stopped: flushes its last spans
	live := rules.NewLive()
	checks := health.New()

	// go-redis logs every failed dial on its own; during an outage that is
	// a flood. Route it to debug: breaker state, metrics and the sampled
	// warning in service say what matters.
	redis.SetLogger(redisLog{log})
	var backend service.Backend
	var svc *service.Service
	var counter *peers.Counter
	if cfg.RedisAddr != "" {
		redisTLS, err := redisTLSConfig(cfg, tlsFiles)
		if err != nil {
			return err
		}
		client := bucket.NewClient(bucket.ClientConfig{Addr: cfg.RedisAddr, MasterName: cfg.RedisMasterName, Cluster: cfg.RedisCluster,
			Username: cfg.RedisUsername, Password: cfg.RedisPassword, SentinelPassword: cfg.RedisSentinelPassword, TLS: redisTLS})
		defer client.Close()
		rd, err := bucket.NewRedis(bucket.RedisConfig{Client: client, Timeout: cfg.RedisTimeout})
		if err != nil {
			return fmt.Errorf("ratelimitsvc: %w", err)
		}
		// Redis is deliberately not a readiness check: during an outage this
		// replica still answers correctly (fail modes), and going unready
		// would turn a limiter outage into Envoy's failure_mode_deny. Only
		// the first answer may be waited for (RedisReadyAtStart).
		backend = rd
		if cfg.RedisReadyAtStart {
			checks.Add("redis-answered", answeredOnce(rd.Prepare))
		}
		if cfg.Replicas == 0 {
			counter, err = peers.New(peers.Config{Client: client, Key: cmp.Or(cfg.KeyPrefix, service.DefaultKeyPrefix) + "{replicas}", ID: cfg.NodeID,
				Set: func(n int) { svc.SetReplicas(n) }, Logger: log})
			if err != nil {
				return fmt.Errorf("ratelimitsvc: %w", err)
			}
		}
	} else {
		log.Info("no Redis configured: buckets are in memory, per process")
		backend = bucket.NewMemory()
	}
	events, err := throttle.New(throttle.Config{Sink: cfg.ThrottleSink, Size: cfg.ThrottleQueue, Logger: log, Registerer: cfg.Registry})
	if err != nil {
		return fmt.Errorf("ratelimitsvc: %w", err)
	}
	svc, err = service.New(service.Config{Rules: live, Backend: backend, KeyPrefix: cfg.KeyPrefix, Replicas: cfg.Replicas,
		Events: events, Registerer: cfg.Registry, Logger: log})
	if err != nil {
		return fmt.Errorf("ratelimitsvc: %w", err)
	}

	sink, err := newCountingSink(live, cfg.Registry)
	if err != nil {
		return fmt.Errorf("ratelimitsvc: %w", err)
	}
	var files *source.File
	if cfg.ConfigDir != "" {
		files = &source.File{Dir: cfg.ConfigDir, Interval: cfg.PollInterval, Sink: sink, Logger: log}
		if err := files.Load(); err != nil {
			return fmt.Errorf("ratelimitsvc: initial rule files: %w", err)
		}
	}
	var ads *source.ADS
	if cfg.XDSAddr != "" {
		ads = &source.ADS{Addr: cfg.XDSAddr, NodeID: cfg.NodeID, TypeURL: cfg.XDSType, StateDir: cfg.StateDir, Sink: sink, Logger: log,
			TLS: tlsFiles, InsecurePlaintext: cfg.InsecurePlaintext, MaxRecvMsgBytes: cfg.XDSMaxRecvMsgBytes, Protocol: cfg.XDSProtocol}
		if _, err := ads.LoadState(); err != nil {
			// A bad copy on disk must not keep the service down; xDS replaces it.
			log.Error("ignoring persisted rate-limit rules", "err", err)
		}
		checks.Add("xds-rules", func(context.Context) error {
			if ads.Version() == "" {
				return errors.New("no rules from the control plane or the state dir yet")
			}
			return nil
		})
		// Staleness is never silent (as in extauthz): /readyz and
		// portico_ratelimitsvc_rules_stale{,_seconds} say since when and why.
		ads.Health = xdsclient.NewHealth()
		ads.Health.StaleAfter = cfg.XDSStaleAfter
		if err := ads.Health.Register(cfg.Registry, "portico_ratelimitsvc_rules"); err != nil {
			return fmt.Errorf("ratelimitsvc: %w", err)
		}
		checks.Add("xds-rules-fresh", ads.Health.Check)
	}

	var lc net.ListenConfig
	glis, err := lc.Listen(ctx, "tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("ratelimitsvc: %w", err)
	}
	hlis, err := lc.Listen(ctx, "tcp", cfg.HTTPAddr)
	if err != nil {
		glis.Close()
		return fmt.Errorf("ratelimitsvc: %w", err)
	}
	grpcOpts := tracer.ServerOptions(nil)
	if tlsFiles != nil {
		// Only gateways spend rate-limit budgets.
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(tlsFiles.ServerConfig(identity.Policy{Roles: []identity.Role{identity.Gateway}}))))
	}
	gs := grpcserver.New(grpcOpts...)
	rlsv3.RegisterRateLimitServiceServer(gs.Server, svc)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /config", func(w http.ResponseWriter, _ *http.Request) {
		t := live.Load()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"versions": t.Versions, "rules": t.Rules()})
	})

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return gs.Serve(gctx, glis, 0) })
	g.Go(func() error { return events.Run(gctx) })
	if counter != nil {
		g.Go(func() error { counter.Run(gctx); return nil })
	}
	g.Go(func() error {
		return httpserver.Serve(gctx, hlis, httpserver.Config{Handler: mux, Gatherer: cfg.Registry, Health: checks, Logger: log})
	})
	if files != nil {
		g.Go(func() error { return files.Run(gctx) })
	}
	if ads != nil {
		g.Go(func() error { return ads.Run(gctx) })
	}
	if tlsFiles != nil {
		g.Go(func() error { return tlsFiles.Run(gctx) })
	}
	log.Info("ratelimitsvc serving", "grpc", glis.Addr().String(), "http", hlis.Addr().String(),
		"redis", cfg.RedisAddr, "xds", cfg.XDSAddr, "config_dir", cfg.ConfigDir)
	if cfg.Ready != nil {
		cfg.Ready <- Addrs{GRPC: glis.Addr().String(), HTTP: hlis.Addr().String()}
	}
	return g.Wait()
}

// countingSink counts rule updates per source and result, and gauges the
// rules each source holds, so a rejected file or NACKed version shows in
// metrics as well as logs.
type countingSink struct {
	live    *rules.Live
	updates *prometheus.CounterVec
	count   *prometheus.GaugeVec
}

func newCountingSink(live *rules.Live, reg prometheus.Registerer) (*countingSink, error) {
	s := &countingSink{
		live: live,
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_ratelimitsvc_rule_updates_total",
			Help: "Rule sets offered by a source (file, xds), by result (applied, rejected).",
		}, []string{"source", "result"}),
		count: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portico_ratelimitsvc_rules",
			Help: "Rules in force, by source.",
		}, []string{"source"}),
	}
	for _, c := range []prometheus.Collector{s.updates, s.count} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return s, nil
}

var _ source.RejectRecorder = (*countingSink)(nil)

func (s *countingSink) Update(src, version string, rs []*rules.Rule) error {
	if err := s.live.Update(src, version, rs); err != nil {
		return err // the source reports it through Rejected
	}
	s.updates.WithLabelValues(src, "applied").Inc()
	s.count.WithLabelValues(src).Set(float64(len(rs)))
	return nil
}

func (s *countingSink) Rejected(src string, _ error) {
	s.updates.WithLabelValues(src, "rejected").Inc()
}

// redisLog adapts go-redis's internal logging to slog at debug level.
type redisLog struct{ l *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	r.l.DebugContext(ctx, "redis client: "+fmt.Sprintf(format, v...))
}
