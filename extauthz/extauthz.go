// Package extauthz wires Portico's ext_authz service together: the
// Authorization gRPC service (authz), the policy it decides with, arriving
// over xDS from the control plane (xdsclient) and persisted to disk in the
// background so the service boots and decides while the control plane is
// down (policy.Saver / policy.Load), and the HTTP endpoints for metrics and
// health.
package extauthz

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/portico-io/portico/extauthz/authz"
	"github.com/portico-io/portico/extauthz/policy"
	"github.com/portico-io/portico/internal/grpcserver"
	"github.com/portico-io/portico/internal/health"
	"github.com/portico-io/portico/internal/httpserver"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlsfiles"
	"github.com/portico-io/portico/internal/tracing"
	"github.com/portico-io/portico/internal/xdsclient"
	"github.com/portico-io/portico/internal/xdscontract"
)

// Defaults for Config.
const (
	DefaultGRPCAddr      = "127.0.0.1:18100"
	DefaultHTTPAddr      = "127.0.0.1:18101"
	DefaultXDSAddr       = "127.0.0.1:18000"
	DefaultStateDir      = ".run/extauthz"
	NodeCluster          = xdscontract.NodeClusterExtAuthz
	ServiceName          = "portico-extauthz" // service.name of its spans
	DefaultPruneEvery    = time.Minute
	authorizationService = "envoy.service.auth.v3.Authorization"
)

// Config configures Run. Zero values take the defaults, except XDSAddr:
// empty means "no control plane, the persisted policy only".
type Config struct {
	GRPCAddr string
	HTTPAddr string
	XDSAddr  string
	// NodeID identifies this replica to the control plane (default
	// "extauthz-<hostname>").
	NodeID string
	// StateDir holds the last applied policy.
	StateDir string
	// SecretsDir holds the secrets providers reference by name (their
	// introspection client secrets), one file each, e.g. a mounted
	// Kubernetes Secret; see authz.Config.
	SecretsDir string
	// MinJWKSRefreshInterval and TokenCacheSize: see authz.Config.
	MinJWKSRefreshInterval time.Duration
	TokenCacheSize         int
	// XDSMinBackoff and XDSMaxBackoff bound reconnect delays.
	XDSMinBackoff, XDSMaxBackoff time.Duration
	// XDSMaxRecvMsgBytes bounds one xDS response (default
	// xdsclient.DefaultMaxRecvMsgBytes): every ApiKeyShard arrives in one.
	XDSMaxRecvMsgBytes int
	// XDSStaleAfter is how long the policy may be out of sync with the
	// control plane before /readyz fails (default
	// xdsclient.DefaultStaleAfter); a response that cannot be received
	// fails it at once. Decisions continue on the last good policy.
	XDSStaleAfter time.Duration
	// XDSProtocol is xdsclient.ProtocolDelta (default: a key change sends
	// one ApiKeyShard) or xdsclient.ProtocolSotW.
	XDSProtocol string
	// TLS names this workload's certificate files (role extauthz): the
	// ext_authz port admits gateway identities only, and the xDS client
	// presents it. Without files, InsecurePlaintext must be set.
	TLS               tlsfiles.Config
	InsecurePlaintext bool
	// Tracing exports a span per Check to an OTLP collector; off without
	// Tracing.Endpoint. ServiceName defaults to ServiceName, InstanceID to
	// NodeID; the collector is shown TLS's certificate when it asks.
	Tracing  tracing.Config
	Logger   *slog.Logger
	Registry *prometheus.Registry

	// Ready, when set, receives the listen addresses once both servers
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
	if c.NodeID == "" {
		host, _ := os.Hostname()
		c.NodeID = "extauthz-" + host
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
		c.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
}

// Run serves until ctx is done.
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	log := cfg.Logger
	srv := authz.New(authz.Config{
		TokenCacheSize: cfg.TokenCacheSize, MinJWKSRefreshInterval: cfg.MinJWKSRefreshInterval,
		SecretsDir: cfg.SecretsDir, Registerer: cfg.Registry, Logger: log,
	})
	tc := cfg.TLS
	tc.Registerer, tc.MetricPrefix, tc.Logger = cfg.Registry, "portico_extauthz", log
	tlsFiles, err := tlsfiles.LoadOrPlaintext(tc, cfg.InsecurePlaintext,
		"extauthz: PLAINTEXT: any process that reaches the ext_authz port can probe API keys and tokens; use only for debugging")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	trc := cfg.Tracing
	trc.ServiceName, trc.InstanceID = cmp.Or(trc.ServiceName, ServiceName), cmp.Or(trc.InstanceID, cfg.NodeID)
	trc.Workload, trc.Logger, trc.Registerer, trc.MetricPrefix = tlsFiles, log, cfg.Registry, "portico_extauthz"
	tracer, err := tracing.New(ctx, trc)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	defer func() { _ = tracer.Shutdown(ctx) }() // after the server stopped: flushes its last spans
	// A Check continues the trace of Envoy's call, else of the request.
	grpcOpts := tracer.ServerOptions(authz.TraceCarrier)
	if tlsFiles != nil {
		// Only gateways ask for decisions.
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(tlsFiles.ServerConfig(gatewaysOnly))))
	}
	g := grpcserver.New(grpcOpts...)
	authv3.RegisterAuthorizationServer(g.Server, srv)
	g.Health.SetServingStatus(authorizationService, healthpb.HealthCheckResponse_NOT_SERVING)

	grp, gctx := errgroup.WithContext(ctx)
	if tlsFiles != nil {
		grp.Go(func() error { return tlsFiles.Run(gctx) })
	}
	// Persisting runs beside applying, so an ACK never waits for the disk:
	// the saver writes the newest complete policy in the background. It
	// stops only after everything else (the xDS client included) has, so
	// the last policy applied is written before Run returns.
	saver, err := policy.NewSaver(policy.SaverConfig{Dir: cfg.StateDir, Logger: log})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	saverCtx, stopSaver := context.WithCancel(context.WithoutCancel(ctx))
	saverDone := make(chan struct{})
	go func() {
		defer close(saverDone)
		_ = saver.Run(saverCtx) // always nil; failed writes are logged
	}()
	defer func() {
		stopSaver()
		<-saverDone
	}()
	ap := &applier{srv: srv, dir: cfg.StateDir, saver: saver, log: log, ctx: gctx, onReady: func() {
		g.Health.SetServingStatus(authorizationService, healthpb.HealthCheckResponse_SERVING)
	}}
	switch err := ap.boot(); {
	case errors.Is(err, policy.ErrNoState):
		log.Info("extauthz: no persisted policy yet", "dir", cfg.StateDir)
	case err != nil:
		log.Warn("extauthz: persisted policy not loaded", "dir", cfg.StateDir, "err", err)
	}
	if cfg.XDSAddr == "" && srv.Policy() == nil {
		log.Warn("extauthz: no xDS address and no persisted policy: every check is denied")
	}

	checks := health.New()
	checks.Add("policy", func(context.Context) error {
		if !ap.ready() {
			return errNotLoaded
		}
		return nil
	})
	// Staleness is never silent: /readyz fails, naming since when and why,
	// once the policy has been out of sync for XDSStaleAfter (or at once
	// when a response cannot be received), and the metrics
	// portico_extauthz_policy_stale{,_seconds} say so. Decisions go on
	// with the last good policy (static stability) and the gRPC health
	// status stays SERVING; where readiness removes the pod from a Service,
	// XDSStaleAfter is how long a control-plane outage may last before
	// gateways lose this replica, so its default is well above a restart.
	var fresh *xdsclient.Health
	if cfg.XDSAddr != "" {
		fresh = xdsclient.NewHealth()
		fresh.StaleAfter = cfg.XDSStaleAfter
		if err := fresh.Register(cfg.Registry, "portico_extauthz_policy"); err != nil {
			return fmt.Errorf("extauthz: %w", err)
		}
		checks.Add("policy-xds", fresh.Check)
	}
	var lc net.ListenConfig
	grpcLis, err := lc.Listen(ctx, "tcp", cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("extauthz: grpc listener: %w", err)
	}
	httpLis, err := lc.Listen(ctx, "tcp", cfg.HTTPAddr)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("extauthz: http listener: %w", err)
	}
	grp.Go(func() error { return g.Serve(gctx, grpcLis, 5*time.Second) })
	grp.Go(func() error {
		return httpserver.Serve(gctx, httpLis, httpserver.Config{Gatherer: cfg.Registry, Health: checks, Logger: log})
	})
	if cfg.XDSAddr != "" {
		grp.Go(func() error {
			return xdsclient.Run(gctx, xdsclient.Config{
				Addr: cfg.XDSAddr, Node: &corev3.Node{Id: cfg.NodeID, Cluster: NodeCluster, UserAgentName: "portico-extauthz"},
				Types: policy.Types, Apply: ap.apply, MinBackoff: cfg.XDSMinBackoff, MaxBackoff: cfg.XDSMaxBackoff,
				TLS: tlsFiles, InsecurePlaintext: cfg.InsecurePlaintext, MaxRecvMsgBytes: cfg.XDSMaxRecvMsgBytes, Protocol: cfg.XDSProtocol, Health: fresh, Logger: log,
			})
		})
	}
	grp.Go(func() error {
		t := time.NewTicker(DefaultPruneEvery)
		defer t.Stop()
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-t.C:
				srv.Prune()
			}
		}
	})
	if cfg.Ready != nil {
		cfg.Ready <- Addrs{GRPC: grpcLis.Addr().String(), HTTP: httpLis.Addr().String()}
	}
	log.Info("extauthz: serving", "grpc", grpcLis.Addr().String(), "http", httpLis.Addr().String(), "xds", cfg.XDSAddr, "node", cfg.NodeID)
	err = grp.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

var errNotLoaded = errors.New("extauthz: no policy loaded yet")

// ErrConfig is a Config Run cannot serve with.
var ErrConfig = errors.New("extauthz: bad config")

// gatewaysOnly admits the identities allowed to ask for decisions.
var gatewaysOnly = identity.Policy{Roles: []identity.Role{identity.Gateway}}

// applier turns xDS responses into policies. apply runs on the xDS client's
// goroutine only; mu guards cur and loaded against readiness checks.
type applier struct {
	srv     *authz.Server
	dir     string
	saver   *policy.Saver
	log     *slog.Logger
	ctx     context.Context
	onReady func()

	mu sync.Mutex
	// cur is the last policy applied: the next one is built from it
	// (policy.BuildFrom), merging one type into its Raw.
	cur    *policy.Policy
	loaded bool
}

// boot loads the persisted policy, if any.
func (a *applier) boot() error {
	res, err := policy.Load(a.dir)
	if err != nil {
		return err
	}
	p, err := policy.Build(res, time.Now())
	if err != nil {
		return err
	}
	a.srv.SetPolicy(p)
	a.mu.Lock()
	a.cur = p
	a.mu.Unlock()
	a.markLoaded(p)
	a.log.Info("extauthz: booted from the persisted policy", "dir", a.dir, "versions", p.Versions, "keys", p.NumKeys())
	go a.srv.Prefetch(a.ctx)
	return nil
}

// apply builds the policy with typeURL's new state from the current one,
// decoding only the API-key shards that changed, and puts it in force. A
// complete policy is handed to the saver, which writes it in the
// background: the ACK does not wait for the disk.
func (a *applier) apply(typeURL, version string, res []*anypb.Any) error {
	a.mu.Lock()
	prev := a.cur
	a.mu.Unlock()
	var base policy.Resources
	if prev != nil {
		base = prev.Raw
	}
	p, err := policy.BuildFrom(prev, base.With(typeURL, policy.TypeResources{Version: version, Resources: res}), time.Now())
	if err != nil {
		return err
	}
	a.srv.SetPolicy(p)
	a.mu.Lock()
	a.cur = p
	a.mu.Unlock()
	a.log.Info("extauthz: policy applied", "type", typeURL, "version", version, "resources", len(res))
	if p.Complete() {
		a.saver.Save(p)
		a.markLoaded(p)
	}
	go a.srv.Prefetch(a.ctx)
	return nil
}

func (a *applier) markLoaded(p *policy.Policy) {
	if !p.Complete() {
		return
	}
	a.mu.Lock()
	first := !a.loaded
	a.loaded = true
	a.mu.Unlock()
	if first {
		a.onReady()
	}
}

func (a *applier) ready() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.loaded
}
