// Package controlplane wires the control plane together: the Postgres
// config store, the admin API, the snapshot compiler and the xDS server.
//
// Every accepted change commits a new config version in Postgres and
// notifies every replica (LISTEN/NOTIFY, with polling as a safety net); each
// replica compiles that version deterministically and publishes it to its
// xDS clients. Replicas therefore serve identical snapshots without talking
// to each other.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/portico-io/portico/controlplane/admin"
	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/controlplane/fleet"
	"github.com/portico-io/portico/controlplane/nodes"
	"github.com/portico-io/portico/controlplane/rollout"
	"github.com/portico-io/portico/controlplane/seal"
	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/controlplane/store"
	"github.com/portico-io/portico/controlplane/xds"
	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/grpcserver"
	"github.com/portico-io/portico/internal/health"
	"github.com/portico-io/portico/internal/httpserver"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlsfiles"
)

// Defaults for Config.
const (
	DefaultAdminAddr   = "127.0.0.1:18080"
	DefaultXDSAddr     = "127.0.0.1:18000"
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:55432/portico?sslmode=disable"
)

// Config configures Run. Zero values take the defaults.
type Config struct {
	AdminAddr   string
	XDSAddr     string
	DatabaseURL string
	// DeployMode is rollout.ModeAuto (default: every new version goes to
	// every node at once) or rollout.ModeManual (versions are served only
	// through rollouts).
	DeployMode string
	// ReplicaID names this replica in the fleet view and rollout reports
	// (default host-pid-random).
	ReplicaID string
	// IdempotencyTTL is how long an Idempotency-Key is remembered (default
	// 24h); older records are pruned hourly.
	IdempotencyTTL time.Duration
	// Compile holds the gateway-wide knobs of the compiled Envoy config.
	Compile compile.Options
	// SecretKey is the 32-byte key sealing TLS private keys at rest
	// (package seal). Empty: inline private keys are refused and secrets
	// must reference files on the gateway hosts.
	SecretKey []byte
	// TLS names the control plane's certificate files: the xDS server
	// requires mTLS with them and serves each client the view of its
	// verified role. Without files, InsecurePlaintext must be set.
	TLS tlsfiles.Config
	// InsecurePlaintext serves xDS without TLS, choosing views from what
	// clients claim about themselves; for debugging only (logged loudly).
	InsecurePlaintext bool
	// AdminTokenFile is where the bootstrap admin token lives: made (0600)
	// and printed once on the first start, stored as a hash, accepted
	// from then on. Empty: no bootstrap token (operators use certificates
	// or API tokens made by another admin).
	AdminTokenFile string
	// AdminHosts are the names clients reach the admin API by (Host
	// header); default admin.DefaultAllowedHosts.
	AdminHosts []string
	// IdPAllowLoopbackHTTP accepts JWT providers whose endpoints are plain
	// http on loopback without their own allowInsecureLoopback (set on the
	// stored provider): a development machine's IdP (make run), never
	// production.
	IdPAllowLoopbackHTTP bool
	// OperatorJWT, when set, accepts bearer JWTs from the operators' IdP
	// on the admin API, their claims mapped to roles.
	OperatorJWT *authn.JWTConfig
	// XDSMaxMsgBytes bounds one xDS message either way (default
	// xds.DefaultMaxMsgBytes, the receive limit of Portico's own clients).
	// Every resource of a type goes in one state-of-the-world response,
	// and in the first delta response of a stream: a million API keys take
	// about 78 MB plus their scopes.
	XDSMaxMsgBytes int
	// Stdout receives the bootstrap token when it is made (default
	// os.Stdout); it is never logged.
	Stdout io.Writer
	Logger *slog.Logger
	// Registry receives every metric; a new one is made when nil.
	Registry *prometheus.Registry

	// Ready, when set, is closed once both servers listen and the first
	// snapshot is published (a test hook).
	Ready chan<- Addrs
}

// Addrs are the addresses the servers actually listen on.
type Addrs struct{ Admin, XDS string }

func (c *Config) defaults() {
	if c.AdminAddr == "" {
		c.AdminAddr = DefaultAdminAddr
	}
	if c.XDSAddr == "" {
		c.XDSAddr = DefaultXDSAddr
	}
	if c.DatabaseURL == "" {
		c.DatabaseURL = DefaultDatabaseURL
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ReplicaID == "" {
		c.ReplicaID = fleet.DefaultReplicaID()
	}
	if c.IdempotencyTTL <= 0 {
		c.IdempotencyTTL = 24 * time.Hour
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
	tc := cfg.TLS
	tc.Registerer, tc.MetricPrefix, tc.Logger = cfg.Registry, "portico_controlplane", log
	tlsFiles, err := tlsfiles.LoadOrPlaintext(tc, cfg.InsecurePlaintext,
		"controlplane: xDS and the admin API serve PLAINTEXT: any process that reaches xDS can claim to be a gateway and receive TLS keys; use only for debugging")
	if err != nil {
		return fmt.Errorf("%w: xDS server: %w", ErrConfig, err)
	}

	var sealer admin.Sealer // nil interface, not a nil *seal.Sealer
	if len(cfg.SecretKey) > 0 {
		s, err := seal.New(cfg.SecretKey)
		if err != nil {
			return fmt.Errorf("controlplane: secret key: %w", err)
		}
		sealer = s
		if cfg.Compile.Unseal == nil {
			cfg.Compile.Unseal = s.Open
		}
	}

	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()

	tracker := nodes.NewTracker()
	if err := cfg.Registry.Register(tracker.Collector(nodes.DefaultStaleAfter)); err != nil {
		return fmt.Errorf("controlplane: metrics: %w", err)
	}
	xsrv := xds.New(ctx, xds.Config{RequireIdentity: tlsFiles != nil, Tracker: tracker, Registerer: cfg.Registry, Logger: log, MaxMsgBytes: cfg.XDSMaxMsgBytes})
	pub := newPublisher(st, xsrv, cfg.Compile, cfg.Registry, log)
	// The rollout controller is the xDS policy; it must be in place before
	// the first publish so manual mode never serves the head by accident.
	ctl, err := rollout.New(ctx, rollout.Config{
		DatabaseURL: cfg.DatabaseURL, Mode: cfg.DeployMode, Tracker: tracker, XDS: xsrv,
		Snapshots: pub.snapshot,
		Rollback: func(ctx context.Context, to int64, reason string) (int64, error) {
			res, err := st.Rollback(ctx, store.Meta{Author: "rollout-controller", Reason: reason}, to, nil)
			return res.Version, err
		},
		ReplicaID: cfg.ReplicaID, Registerer: cfg.Registry, Logger: log,
	})
	if err != nil {
		return fmt.Errorf("controlplane: rollouts: %w", err)
	}
	defer ctl.Close() //nolint:contextcheck // Close runs once ctx is done and must still release the leader lock
	fv, err := fleet.New(ctx, fleet.Config{DatabaseURL: cfg.DatabaseURL, Tracker: tracker, ReplicaID: cfg.ReplicaID, Logger: log})
	if err != nil {
		return fmt.Errorf("controlplane: fleet: %w", err)
	}
	defer fv.Close()

	if err := bootstrapAdminToken(ctx, st, cfg.AdminTokenFile, cfg.Stdout, log); err != nil {
		return err
	}
	auth, err := authn.New(authn.Config{Tokens: st, JWT: cfg.OperatorJWT, Logger: log})
	if err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	adminHandler, err := admin.New(admin.Config{Store: st, Nodes: fv, Rollouts: ctl, Registry: cfg.Registry, Logger: log, Sealer: sealer,
		Auth: auth, AllowedHosts: cfg.AdminHosts, LoopbackIdPs: cfg.IdPAllowLoopbackHTTP})
	if err != nil {
		return fmt.Errorf("controlplane: admin: %w", err)
	}
	// Ready = a snapshot to serve. Postgres is deliberately not a readiness
	// check: during a database outage every replica keeps serving xDS from
	// its last snapshot (static stability); going unready would empty the
	// xDS Service and cut every gateway off. Admin writes fail meanwhile
	// with 503, and postgres_up says why.
	checks := health.New()
	checks.Add("snapshot", pub.ready)
	pgUp := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "portico_controlplane_postgres_up",
		Help: "1 when the config store answers a ping (checked at scrape time), else 0.",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if st.Ping(ctx) != nil {
			return 0
		}
		return 1
	})
	if err := cfg.Registry.Register(pgUp); err != nil {
		return fmt.Errorf("controlplane: metrics: %w", err)
	}

	var lc net.ListenConfig
	adminLis, err := lc.Listen(ctx, "tcp", cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("controlplane: admin listener: %w", err)
	}
	xdsLis, err := lc.Listen(ctx, "tcp", cfg.XDSAddr)
	if err != nil {
		adminLis.Close()
		return fmt.Errorf("controlplane: xds listener: %w", err)
	}
	// The send limit matches the clients' receive limit (gRPC's default
	// send limit has none): an oversized response then fails at the server
	// too, not only at the client. Requests get the same room (delta
	// subscriptions name every resource a client holds).
	grpcOpts := []grpc.ServerOption{grpc.MaxSendMsgSize(xsrv.MaxMsgBytes()), grpc.MaxRecvMsgSize(xsrv.MaxMsgBytes())}
	if tlsFiles != nil {
		// Every platform role may connect; the view it gets is its role's.
		grpcOpts = append(grpcOpts, grpc.Creds(credentials.NewTLS(tlsFiles.ServerConfig(identity.Policy{}))))
	}
	g := grpcserver.New(grpcOpts...)
	xsrv.Register(g.Server)

	grp, gctx := errgroup.WithContext(ctx)
	adminHTTP := httpserver.Config{Handler: adminHandler, Gatherer: cfg.Registry, Health: checks, Logger: log}
	if tlsFiles != nil {
		// The admin port is TLS too; a client certificate is optional
		// (people and scripts authenticate with tokens).
		adminHTTP.TLS = tlsFiles.APIServerConfig("h2", "http/1.1")
	}
	grp.Go(func() error { return httpserver.Serve(gctx, adminLis, adminHTTP) })
	grp.Go(func() error { return g.Serve(gctx, xdsLis, 5*time.Second) })
	grp.Go(func() error { return pub.run(gctx) })
	if tlsFiles != nil {
		grp.Go(func() error { return tlsFiles.Run(gctx) })
	}
	grp.Go(func() error { return ctl.Run(gctx) })
	grp.Go(func() error { return fv.Run(gctx) })
	grp.Go(func() error { pruneIdempotency(gctx, st, cfg.IdempotencyTTL, log); return nil })
	if cfg.Ready != nil {
		grp.Go(func() error {
			select {
			case <-pub.first:
				cfg.Ready <- Addrs{Admin: adminLis.Addr().String(), XDS: xdsLis.Addr().String()}
			case <-gctx.Done():
			}
			return nil
		})
	}
	log.Info("controlplane: serving", "admin", adminLis.Addr().String(), "xds", xdsLis.Addr().String())
	err = grp.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// openStore retries until Postgres answers: the control plane is useless
// without it, but a database that starts a little later must not need an
// operator to restart us.
func openStore(ctx context.Context, cfg Config) (*store.Store, error) {
	backoff := 200 * time.Millisecond
	for {
		st, err := store.Open(ctx, store.Config{DatabaseURL: cfg.DatabaseURL, Logger: cfg.Logger,
			Check: func(c *spec.Config) error { return compile.CheckConfig(c, cfg.Compile) }})
		if err == nil {
			return st, nil
		}
		cfg.Logger.Warn("controlplane: postgres not available, retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("controlplane: open store: %w", err)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// pruneIdempotency deletes expired idempotency records every hour. Every
// replica may run it: the DELETE is idempotent.
func pruneIdempotency(ctx context.Context, st *store.Store, ttl time.Duration, log *slog.Logger) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		n, err := st.PruneIdempotency(pctx, ttl)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("controlplane: pruning idempotency records", "err", err)
		case n > 0:
			log.Info("controlplane: pruned idempotency records", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
