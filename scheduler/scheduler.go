// Package scheduler wires the scheduler's roles — REST API, runner,
// worker, reaper — around one Postgres store. Each role is enabled by
// Config; any number of processes may run any mix of roles against the
// same database.
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	schedulerv1 "github.com/portico-io/portico/proto/portico/scheduler/v1"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/internal/grpcserver"
	"github.com/portico-io/portico/internal/health"
	"github.com/portico-io/portico/internal/httpserver"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlsfiles"
	"github.com/portico-io/portico/scheduler/api"
	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/metrics"
	"github.com/portico-io/portico/scheduler/notify"
	"github.com/portico-io/portico/scheduler/reaper"
	"github.com/portico-io/portico/scheduler/runner"
	"github.com/portico-io/portico/scheduler/secret"
	"github.com/portico-io/portico/scheduler/shard"
	"github.com/portico-io/portico/scheduler/store"
	"github.com/portico-io/portico/scheduler/target"
	"github.com/portico-io/portico/scheduler/target/httptarget"
	"github.com/portico-io/portico/scheduler/worker"
	"github.com/portico-io/portico/scheduler/workerapi"
)

// Defaults for zero Config fields.
const (
	DefaultHTTPAddr = "127.0.0.1:18300"
	// DefaultWorkerGRPCAddr is the command's default for the worker API
	// (Config.WorkerGRPCAddr empty means not served).
	DefaultWorkerGRPCAddr = "127.0.0.1:18301"
	DefaultDatabaseURL    = "postgres://postgres@127.0.0.1:55432/portico?sslmode=disable"
)

// Roles selects what a process does.
type Roles struct{ API, Runner, Worker, Reaper, Notifier bool }

// AllRoles enables every role.
var AllRoles = Roles{API: true, Runner: true, Worker: true, Reaper: true, Notifier: true}

// Config configures Run. Zero durations take each role's default.
type Config struct {
	HTTPAddr    string
	DatabaseURL string
	Roles       Roles
	// TargetAllowlist is PORTICO_SCHEDULER_TARGET_ALLOWLIST (see jobspec.Guard).
	TargetAllowlist string
	WorkerID        string
	Lease           time.Duration
	Tick            time.Duration
	WorkerPoll      time.Duration
	ReapInterval    time.Duration
	Concurrency     int
	// Unsharded makes every runner scan every due run instead of firing
	// only its share of the 1024 shards.
	Unsharded bool
	// ShardTTL is the shard lease (default 10 s).
	ShardTTL time.Duration
	// TenantMaxRunning caps each tenant's running runs (0: no cap).
	TenantMaxRunning int
	// TenantRate limits each tenant's dispatches per second with a
	// TenantBurst-deep token bucket (0: no limit); see store.Config.
	TenantRate  float64
	TenantBurst int
	Logger      *slog.Logger
	// Listener, when set, is used instead of listening on HTTPAddr.
	Listener net.Listener
	// WorkerGRPCAddr serves the gRPC worker API for remote workers
	// (empty: not served unless WorkerGRPCListener is set).
	WorkerGRPCAddr     string
	WorkerGRPCListener net.Listener
	// TLS names the scheduler's certificate files: the REST API serves TLS
	// (client certificates optional) and the worker API admits
	// only worker identities (it hands out leased runs and their payloads).
	// Serving either API without files needs InsecurePlaintext.
	TLS               tlsfiles.Config
	InsecurePlaintext bool
	// AdminTokenFile is the bootstrap admin token (the control plane's
	// file in make run): made 0600 when missing, accepted as role admin.
	// Empty: callers need an operator certificate or an IdP JWT.
	AdminTokenFile string
	// OperatorJWT accepts the IdP's JWTs; its TenantClaim binds a JWT to
	// a tenant.
	OperatorJWT *authn.JWTConfig
	// AdminHosts are the names clients reach the REST API by (default
	// loopback).
	AdminHosts []string
	// SecretsDir holds one file per secret name (a mounted Kubernetes
	// Secret) for target.http.secretRef; read at call time. Empty: no
	// secrets (jobs with a secretRef are accepted but their runs fail).
	SecretsDir string
	// SecretBindings is the file binding each secret to tenants and
	// destination URLs (secret.Binding); re-read when it changes. Without
	// it no secret can be used.
	SecretBindings string
	// Targets adds executors for target kinds besides HTTP (QUEUE,
	// CONTAINER …), keyed by target.type; the API accepts those kinds.
	Targets target.Registry
}

// errPlaintext refuses to serve jobs, or leased runs and their payloads, on
// a plaintext port nobody asked for.
var errPlaintext = errors.New("scheduler: the REST and worker APIs need a TLS certificate (--tls-cert-file, --tls-key-file, --tls-ca-file), or plaintext asked for")

// Run runs the enabled roles until ctx is done or one fails.
func Run(ctx context.Context, cfg Config) error {
	workerAPI := cfg.WorkerGRPCListener != nil || cfg.WorkerGRPCAddr != ""
	if (workerAPI || cfg.Roles.API) && !cfg.TLS.IsSet() && !cfg.InsecurePlaintext {
		return errPlaintext
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = DefaultHTTPAddr
	}
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = DefaultDatabaseURL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	log := cfg.Logger
	guard, err := jobspec.NewGuard(cfg.TargetAllowlist, nil)
	if err != nil {
		return err
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	st, err := store.Open(octx, store.Config{DatabaseURL: cfg.DatabaseURL, MaxConns: 20, TenantMaxRunning: cfg.TenantMaxRunning,
		TenantRate: cfg.TenantRate, TenantBurst: cfg.TenantBurst, Logger: log})
	cancel()
	if err != nil {
		return err
	}
	defer st.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg)
	reg.MustRegister(metrics.NewStateCollector(st, log))
	checks := health.New()
	checks.Add("postgres", st.Ping)

	tc := cfg.TLS
	tc.Registerer, tc.MetricPrefix, tc.Logger = reg, "portico_scheduler", log
	var files *tlsfiles.Files
	if tc.IsSet() || workerAPI || cfg.Roles.API {
		files, err = tlsfiles.LoadOrPlaintext(tc, cfg.InsecurePlaintext,
			"scheduler: the REST and worker APIs are PLAINTEXT: anyone who reaches them can read jobs, lease runs and read their payloads; use only for debugging")
		if err != nil {
			return fmt.Errorf("scheduler: %w", err)
		}
	}

	lis := cfg.Listener
	if lis == nil {
		if lis, err = (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.HTTPAddr); err != nil {
			return fmt.Errorf("scheduler: listen: %w", err)
		}
	}
	secrets := secret.NewDir(cfg.SecretsDir, cfg.SecretBindings, log)
	if fi, err := os.Stat(cfg.SecretsDir); cfg.SecretsDir != "" && (err != nil || !fi.IsDir()) {
		// Not fatal: a volume may be mounted after start; every read retries.
		log.Warn("scheduler: secrets directory not readable yet; jobs referencing secrets will fail until it is", "dir", cfg.SecretsDir)
	}
	if cfg.SecretsDir != "" && cfg.SecretBindings == "" {
		log.Warn("scheduler: a secrets directory without --secret-bindings: no job can use any secret until each is bound to tenants and destinations", "dir", cfg.SecretsDir)
	}
	httpTarget, err := httptarget.New(httptarget.Config{Guard: guard, Secrets: secrets, OnBreakerState: func(host string, s circuitbreaker.State) {
		m.BreakerTransitions.WithLabelValues(s.String()).Inc()
		log.Warn("scheduler: target circuit changed", "host", host, "state", s.String())
	}})
	if err != nil {
		return err
	}
	targets := target.Registry{jobspec.TargetHTTP: httpTarget}
	for kind, t := range cfg.Targets {
		targets[kind] = t
	}
	var handler http.Handler
	if cfg.Roles.API {
		auth, err := newAuthenticator(ctx, st, cfg.AdminTokenFile, cfg.OperatorJWT, log)
		if err != nil {
			return err
		}
		am, err := authz.NewMetrics(reg, "scheduler")
		if err != nil {
			return err
		}
		a, err := api.New(api.Config{Store: st, Tokens: st.Tokens(), Guard: guard, TargetKinds: targets.Kinds(), Secrets: secrets, Logger: log,
			Auth: auth, AllowedHosts: cfg.AdminHosts, Metrics: am})
		if err != nil {
			return err
		}
		handler = a
	}
	g, gctx := errgroup.WithContext(ctx)
	hs := httpserver.Config{Handler: handler, Gatherer: reg, Health: checks, Logger: log}
	if files != nil {
		// The REST port is TLS; a client certificate is optional (API
		// callers authenticate with tokens).
		hs.TLS = files.APIServerConfig("h2", "http/1.1")
		g.Go(func() error { return files.Run(gctx) })
	}
	g.Go(func() error { return httpserver.Serve(gctx, lis, hs) })
	var firing func() bool // this process's runner, for the worker to yield to
	if cfg.Roles.Runner {
		rcfg := runner.Config{Store: st, Tick: cfg.Tick, Metrics: m, Logger: log}
		if !cfg.Unsharded {
			sm, err := shard.New(shard.Config{Store: st, ID: cfg.WorkerID, TTL: cfg.ShardTTL, Metrics: m, Logger: log})
			if err != nil {
				return err
			}
			rcfg.Shards = sm
			g.Go(func() error { return sm.Run(gctx) })
		}
		r, err := runner.New(rcfg)
		if err != nil {
			return err
		}
		firing = r.Firing
		g.Go(func() error { return r.Run(gctx) })
	}
	if cfg.Roles.Worker {
		w, err := worker.New(worker.Config{Store: st, Targets: targets, ID: cfg.WorkerID, Lease: cfg.Lease, Poll: cfg.WorkerPoll,
			Concurrency: cfg.Concurrency, Yield: firing, Metrics: m, Logger: log})
		if err != nil {
			return err
		}
		g.Go(func() error { return w.Run(gctx) })
	}
	if cfg.Roles.Reaper {
		r, err := reaper.New(reaper.Config{Store: st, Interval: cfg.ReapInterval, Metrics: m, Logger: log})
		if err != nil {
			return err
		}
		g.Go(func() error { return r.Run(gctx) })
	}
	if glis := cfg.WorkerGRPCListener; glis != nil || cfg.WorkerGRPCAddr != "" {
		if glis == nil {
			if glis, err = (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.WorkerGRPCAddr); err != nil {
				return fmt.Errorf("scheduler: listen worker API: %w", err)
			}
		}
		var opts []grpc.ServerOption
		if files != nil {
			opts = append(opts, grpc.Creds(credentials.NewTLS(files.ServerConfig(identity.Policy{Roles: []identity.Role{identity.Worker}}))))
		}
		svc, err := workerapi.New(workerapi.Config{Store: st, Metrics: m, Logger: log, RequireIdentity: files != nil})
		if err != nil {
			return err
		}
		gs := grpcserver.New(opts...)
		schedulerv1.RegisterWorkerServiceServer(gs, svc)
		g.Go(func() error { return gs.Serve(gctx, glis, 0) })
		log.Info("scheduler: worker API serving", "addr", glis.Addr().String())
	}
	if cfg.Roles.Notifier {
		n, err := notify.New(notify.Config{Store: st, Guard: guard, Sent: m.Notifications, Logger: log})
		if err != nil {
			return err
		}
		g.Go(func() error { return n.Run(gctx) })
	}
	log.Info("scheduler: serving", "addr", lis.Addr().String(), "api", cfg.Roles.API, "runner", cfg.Roles.Runner,
		"worker", cfg.Roles.Worker, "reaper", cfg.Roles.Reaper, "notifier", cfg.Roles.Notifier)
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
