// Command scheduler runs Portico's job scheduler: the REST API (:18300),
// runners, workers and the reaper on PostgreSQL, each role enabled by a
// flag (all on by default).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"syscall"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/internal/envflag"
	"github.com/portico-io/portico/internal/logging"
	"github.com/portico-io/portico/internal/tlsfiles"
	"github.com/portico-io/portico/scheduler"
)

func main() {
	fs := flag.NewFlagSet("scheduler", flag.ExitOnError)
	addr := envflag.String(fs, "http-addr", "PORTICO_SCHEDULER_HTTP_ADDR", scheduler.DefaultHTTPAddr, "REST API, /metrics and health listen address")
	grpcAddr := envflag.String(fs, "worker-grpc-addr", "PORTICO_SCHEDULER_WORKER_GRPC_ADDR", scheduler.DefaultWorkerGRPCAddr, "gRPC worker API listen address for remote workers (empty: off)")
	db := envflag.String(fs, "database-url", "PORTICO_DATABASE_URL", scheduler.DefaultDatabaseURL, "PostgreSQL URL")
	allow := envflag.String(fs, "target-allowlist", "PORTICO_SCHEDULER_TARGET_ALLOWLIST", "", "comma-separated host:port, host or CIDR HTTP targets may use; empty = public addresses only")
	secretsDir := envflag.String(fs, "secrets-dir", "PORTICO_SCHEDULER_SECRETS_DIR", "", "directory with one file per secret name (a mounted Kubernetes Secret) for HTTP targets' secretRef; re-read on every call")
	secretBindings := envflag.String(fs, "secret-bindings", "PORTICO_SCHEDULER_SECRET_BINDINGS", "", "YAML file binding each secret to the tenants that may reference it and the URLs it may be sent to; re-read when it changes (without it no secret can be used)")
	roleAPI := fs.Bool("api", true, "serve the REST API")
	roleRunner := fs.Bool("runner", true, "fire due runs")
	roleWorker := fs.Bool("worker", true, "execute runs")
	roleReaper := fs.Bool("reaper", true, "recover runs with expired leases")
	roleNotifier := fs.Bool("notifier", true, "deliver failure and dead-letter webhooks from the outbox")
	workerID := envflag.String(fs, "worker-id", "PORTICO_NODE_ID", "", "worker id recorded on runs (default host-pid)")
	lease := envflag.Duration(fs, "lease", "PORTICO_SCHEDULER_LEASE", 0, "worker lease (default 30s)")
	tick := envflag.Duration(fs, "tick", "PORTICO_SCHEDULER_TICK", 0, "runner tick (default 1s)")
	concurrency := envflag.Uint(fs, "worker-concurrency", "PORTICO_SCHEDULER_WORKER_CONCURRENCY", 0, "runs one worker executes at once (default 16)")
	tenantCap := envflag.Uint(fs, "tenant-max-running", "PORTICO_SCHEDULER_TENANT_MAX_RUNNING", 0, "cap on each tenant's concurrently running runs across all processes (0: none)")
	tenantRate := envflag.String(fs, "tenant-rate", "PORTICO_SCHEDULER_TENANT_RATE", "0", "each tenant's dispatch rate in runs per second, a token bucket (0: none)")
	tenantBurst := envflag.Uint(fs, "tenant-burst", "PORTICO_SCHEDULER_TENANT_BURST", 0, "depth of each tenant's token bucket (default max(1, rate))")
	unsharded := envflag.Bool(fs, "unsharded", "PORTICO_SCHEDULER_UNSHARDED", false, "runners scan every due run instead of their share of the 1024 shards")
	shardTTL := envflag.Duration(fs, "shard-ttl", "PORTICO_SCHEDULER_SHARD_TTL", 0, "shard lease; a dead runner's shards move after it (default 10s)")
	logFormat := envflag.String(fs, "log-format", "PORTICO_LOG_FORMAT", "json", "log format: json or text")
	logLevel := envflag.String(fs, "log-level", "PORTICO_LOG_LEVEL", "info", "log level")
	tlsFlags := tlsfiles.RegisterFlags(fs)
	authFlags := authn.RegisterFlags(fs)
	plaintext := envflag.Bool(fs, "insecure-plaintext", "PORTICO_INSECURE_PLAINTEXT", false, "serve the REST and worker APIs without TLS (debugging only)")
	_ = fs.Parse(os.Args[1:])

	log, err := logging.New(os.Stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	rate, err := strconv.ParseFloat(*tenantRate, 64)
	if err != nil || rate < 0 {
		fmt.Fprintln(os.Stderr, "scheduler: --tenant-rate must be a non-negative number")
		os.Exit(2)
	}
	cfg := scheduler.Config{
		TLS: tlsFlags.Config(), InsecurePlaintext: *plaintext,
		HTTPAddr: *addr, WorkerGRPCAddr: *grpcAddr, DatabaseURL: *db, TargetAllowlist: *allow, SecretsDir: *secretsDir, SecretBindings: *secretBindings, WorkerID: *workerID,
		Roles: scheduler.Roles{API: *roleAPI, Runner: *roleRunner, Worker: *roleWorker, Reaper: *roleReaper, Notifier: *roleNotifier},
		Lease: *lease, Tick: *tick, Concurrency: int(*concurrency), TenantMaxRunning: int(*tenantCap),
		TenantRate: rate, TenantBurst: int(*tenantBurst), Unsharded: *unsharded, ShardTTL: *shardTTL, Logger: log,
	}
	cfg.AdminTokenFile, cfg.AdminHosts = *authFlags.TokenFile, authFlags.HostList()
	if cfg.OperatorJWT, err = authFlags.JWT(func(r string) error { return authz.CheckRoles([]string{r}) }); err != nil {
		log.Error("scheduler: operator JWTs", "err", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// PORTICO_SCHEDULER_CPUPROFILE=prefix writes a CPU profile of the
	// whole run to prefix.<pid> (the River benchmark's profiles; see
	// scheduler/README.md, "Cost per job").
	if prefix := os.Getenv("PORTICO_SCHEDULER_CPUPROFILE"); prefix != "" {
		f, err := os.Create(prefix + "." + strconv.Itoa(os.Getpid()))
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			log.Error("scheduler: cpu profile", "err", err)
			os.Exit(2)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	if err := scheduler.Run(ctx, cfg); err != nil {
		log.Error("scheduler: exiting", "err", err)
		os.Exit(1)
	}
}
