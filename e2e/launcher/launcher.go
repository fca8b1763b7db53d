// Package launcher is what `make run` runs: it starts every Portico
// component built so far as its own OS process, waits for each to be ready,
// seeds a demo configuration through the admin API, prints what to do next,
// and stops everything on Ctrl-C or SIGTERM (`make stop`).
//
// In between it supervises (package supervisor): a component that exits is
// logged with its exit status and restarted with a backoff while the others
// keep serving, and every state change is written to .run/status.json,
// which `launch status` (`make status`) prints. A cache node that was a
// primary is restarted only once its slots have failed over (or after
// CacheFailoverWait), so it rejoins as a replica of the promoted node
// instead of coming back as an empty primary.
package launcher

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/reshard"
	"github.com/portico-io/portico/cachenode/topology"
	"github.com/portico-io/portico/controlplane/seal"
	"github.com/portico-io/portico/e2e/launcher/supervisor"
	"github.com/portico-io/portico/internal/identity"
)

// Config says where things are. Zero values take the defaults.
type Config struct {
	// Root is the repository root (bin/, envoy/ and .run/ live there).
	Root string
	// AdminURL is the control plane's admin base URL.
	AdminURL string
	// EnvoyBin is the envoy binary; empty looks up ENVOY_BIN, then PATH.
	EnvoyBin string
	// NoEnvoy does not start Envoy even when one is installed.
	NoEnvoy bool
	Out     io.Writer
	// Started, when set, is told each process's pid as it starts,
	// restarts included (tests inspect what it listens on). It is called
	// from the supervisor's goroutines.
	Started func(name string, pid int)
	// Ready, when set, is called once everything is up and seeded.
	Ready func()
	// RateLimitStore is where ratelimitsvc keeps its buckets: StoreRedis
	// (empty: the default) or StoreCache.
	RateLimitStore string
}

// Rate-limit stores of a local run (Config.RateLimitStore, `make run
// RATELIMIT_STORE=…`).
const (
	// StoreRedis is the Redis of make deps (127.0.0.1:56379).
	StoreRedis = "redis"
	// StoreCache is the run's own cache cluster (cachenodes 7000-7005),
	// reached as a Redis Cluster over mutual TLS.
	StoreCache = "cachenode"
)

// ErrStore is a Config.RateLimitStore the launcher does not know.
var ErrStore = errors.New("launcher: unknown rate-limit store")

// Process is one component to start.
type Process struct {
	Name string
	Args []string
	Env  []string
	// Ready is polled (HTTP GET, 2xx) before the next process starts.
	Ready string
	// Dir is the working directory; empty is the launcher's.
	Dir string
	// Prepare, when set, runs before the process starts (the first time
	// only, not before a restart).
	Prepare func(ctx context.Context) error
	// Ports are the TCP ports the process listens on, for the status.
	Ports []int
	// BeforeRestart, when set, may hold a restart (see
	// supervisor.Child.BeforeRestart).
	BeforeRestart func(ctx context.Context, log *slog.Logger) error
}

// Processes lists what `make run` starts, in order, with ratelimitsvc's
// buckets in store (StoreRedis or StoreCache). Later components are added
// here as they land.
func Processes(root, store string) ([]Process, error) {
	bin := func(n string) string { return filepath.Join(root, "bin", n) }
	// Both stores are waited for at start (--redis-ready-at-start): a
	// ratelimitsvc that cannot reach its store is not ready, rather than
	// ready on per-process local buckets. Later outages leave it ready (it
	// decides by fail mode; ratelimitsvc/README.md).
	rateLimit := Process{Name: "ratelimitsvc", Args: append([]string{bin("ratelimitsvc"), "--log-format=text",
		"--state-dir=" + filepath.Join(root, ".run", "ratelimitsvc"), "--redis-ready-at-start"},
		TLSArgs(root, "ratelimitsvc")...),
		Env: []string{"PORTICO_XDS_ADDR=127.0.0.1:18000"}, Ready: "http://127.0.0.1:18201/readyz",
		Ports: []int{18200, 18201}}
	switch store {
	case "", StoreRedis:
		rateLimit.Env = append(rateLimit.Env, "PORTICO_REDIS_ADDR=127.0.0.1:56379")
	case StoreCache:
		var seeds []string
		for i := range CacheNodes {
			seeds = append(seeds, fmt.Sprintf("127.0.0.1:%d", 7000+i))
		}
		// Every node is a seed, replicas too: go-redis's ClusterClient
		// reads the slot map from whichever answers, so a restart after a
		// failover still finds the cluster. The nodes are verified as
		// cachenode identities against the run's CA, and are shown the
		// ratelimit certificate (RESP's client certificates are optional,
		// and make run's nodes need no AUTH: the buckets are in the default
		// namespace). The timeout allows for TLS and gopher-lua on a
		// machine running the whole platform (the default 5 ms suits a
		// dedicated Redis).
		rateLimit.Env = append(rateLimit.Env, "PORTICO_REDIS_ADDR="+strings.Join(seeds, ","),
			"PORTICO_REDIS_TLS_SERVER_ROLE="+string(identity.CacheNode), "PORTICO_REDIS_TIMEOUT=100ms")
	default:
		return nil, fmt.Errorf("%w %q (want %s or %s)", ErrStore, store, StoreRedis, StoreCache)
	}
	ps := []Process{
		// xDS (:18000) is mutual TLS: each process presents its own
		// certificate from .run/pki, and the control plane serves each the
		// view of its role.
		{Name: "controlplane", Args: append(append([]string{bin("controlplane"), "--log-format=text",
			"--secret-key-file=" + SecretKeyFile(root), "--admin-token-file=" + AdminTokenFile(root),
			// The demo IdP (and ARCHITECTURE.md's example provider) serve
			// their JWKS over plain http on loopback.
			"--idp-allow-loopback-http"},
			TLSArgs(root, "controlplane")...), gatewayTLSArgs(root)...),
			Ready: "https://localhost:18080/readyz", Ports: []int{18000, 18080}},
		{Name: "extauthz", Args: append([]string{bin("extauthz"), "--log-format=text", "--state-dir=" + filepath.Join(root, ".run", "extauthz")},
			TLSArgs(root, "extauthz")...),
			Ready: "http://127.0.0.1:18101/readyz", Ports: []int{18100, 18101}},
		{Name: "echo-upstream", Args: []string{bin("echo-upstream"), "--addr=127.0.0.1:18900"}, Ready: "http://127.0.0.1:18900/healthz", Ports: []int{18900}},
		// The worker API (:18301) admits worker certificates only.
		{Name: "scheduler", Args: append([]string{bin("scheduler"), "--log-format=text", "--admin-token-file=" + AdminTokenFile(root)},
			TLSArgs(root, "scheduler")...),
			Env: []string{"PORTICO_SCHEDULER_TARGET_ALLOWLIST=127.0.0.0/8"}, Ready: "https://localhost:18300/readyz",
			Ports: []int{18300, 18301}},
	}
	// Three kvnodes on 18400-18402 (HTTP) and 18500-18502 (internode), each
	// seeded with the others; the first founds the ring, the rest join it.
	for i := range 3 {
		var seeds []string
		for j := range 3 {
			if j != i {
				seeds = append(seeds, fmt.Sprintf("127.0.0.1:%d", 18500+j))
			}
		}
		ps = append(ps, Process{Name: fmt.Sprintf("kvnode-%d", i), Args: append([]string{bin("kvnode"), "--log-format=text",
			fmt.Sprintf("--node-id=kv-%d", i),
			fmt.Sprintf("--http-addr=127.0.0.1:%d", 18400+i), fmt.Sprintf("--grpc-addr=127.0.0.1:%d", 18500+i),
			"--data-dir=" + filepath.Join(root, ".run", fmt.Sprintf("kvnode-%d", i)), "--seeds=" + strings.Join(seeds, ","),
			"--startup-wait=2s",
			// The Raft tier (/v1/cp/) on 18600+i: every node bootstraps with
			// the same three voters, which is safe (Raft keeps one config).
			// It serves the keyspace locks (/v1/cp/locks/… = /v1/kv/locks:…).
			"--raft-bootstrap", "--raft-peers=kv-0=127.0.0.1:18600,kv-1=127.0.0.1:18601,kv-2=127.0.0.1:18602",
			// and the cache cluster's topology (keyspace cache).
			"--cp-keyspaces=locks,cache",
			// The HTTP API authenticates every route: the control plane's
			// admin token, or a certificate (cachenodes: keyspace cache).
			"--admin-token-file=" + AdminTokenFile(root)},
			// Internode gRPC and Raft are mutual TLS between kvnode identities.
			TLSArgs(root, fmt.Sprintf("kvnode-%d", i))...),
			Ready: fmt.Sprintf("https://localhost:%d/readyz", 18400+i), Ports: []int{18400 + i, 18500 + i, 18600 + i}})
	}
	// The cache cluster: three primaries (7000-7002) and a replica of each
	// (7003-7005), bus ports 17000+i, HTTP 18700+i, the slot map in the
	// kvnodes' Raft tier.
	for i := range CacheNodes {
		p := Process{Name: fmt.Sprintf("cachenode-%d", i), Args: append([]string{bin("cachenode"), "--log-format=text",
			fmt.Sprintf("--node-id=cache-%d", i), fmt.Sprintf("--resp-addr=127.0.0.1:%d", 7000+i),
			fmt.Sprintf("--http-addr=127.0.0.1:%d", 18700+i), fmt.Sprintf("--bus-addr=127.0.0.1:%d", 17000+i),
			"--cluster-kv-addrs=" + strings.Join(kvAddrs, ","), "--cluster-name=" + CacheCluster,
			"--cluster-topology-check=500ms", "--maxmemory=256mb"},
			// The cluster bus (replication, slot imports) is mutual TLS
			// between cachenode identities.
			TLSArgs(root, fmt.Sprintf("cachenode-%d", i))...),
			Ready: fmt.Sprintf("http://127.0.0.1:%d/readyz", 18700+i), Ports: []int{7000 + i, 17000 + i, 18700 + i}}
		id := fmt.Sprintf("cache-%d", i)
		p.BeforeRestart = func(ctx context.Context, log *slog.Logger) error {
			return AwaitCacheFailover(ctx, root, kvAddrs, id, CacheFailoverWait, log)
		}
		if i == 0 {
			p.Prepare = func(ctx context.Context) error { return EnsureCacheTopology(ctx, root, kvAddrs) }
		}
		ps = append(ps, p)
	}
	// ratelimitsvc after the controlplane and extauthz, as before; on the
	// cache cluster, after its last node, for it waits for its store.
	at := 2
	if store == StoreCache {
		at = len(ps)
	}
	return slices.Insert(ps, at, rateLimit), nil
}

// The local cache cluster.
const (
	CacheCluster = "portico"
	CacheNodes   = 6
)

var kvAddrs = []string{"127.0.0.1:18400", "127.0.0.1:18401", "127.0.0.1:18402"}

// EnsureCacheTopology publishes the local cache cluster's first map
// (cache-0..2 own a third of the slots each, cache-3..5 replicate them)
// unless one is stored already: kvnode keeps its data in .run across runs,
// and a map reshaped with cachectl or by a failover stays as it is. It
// talks to the kvnodes over TLS as the operator.
func EnsureCacheTopology(ctx context.Context, root string, addrs []string) error {
	op, err := operatorFiles(root)
	if err != nil {
		return err
	}
	var nodes []cluster.NodeSpec
	for i := range CacheNodes {
		nodes = append(nodes, cluster.NodeSpec{ID: fmt.Sprintf("cache-%d", i), Host: "127.0.0.1", Port: 7000 + i, BusPort: 17000 + i})
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tc := op.ClientConfig(identity.Policy{Roles: []identity.Role{identity.KVNode}})
	_, err = reshard.Init(ctx, &topology.Client{Addrs: addrs, Cluster: CacheCluster, TLS: tc}, nodes, 1)
	return err
}

// CacheFailoverWait bounds how long a cache node's restart waits for its
// slots to fail over: well past the failover's detection time (3 s by
// default, the promotion a little later on a loaded machine).
const CacheFailoverWait = 30 * time.Second

// AwaitCacheFailover holds the restart of cache node id while the stored
// map makes it a primary owning slots with a replica that can take them
// over, and returns once it no longer does, or after wait.
//
// Why: a cache node keeps its data in memory only, so a primary restarted
// before its failover comes back empty and still owning its slots (and its
// replicas would resync the empty data set from it); restarted after it,
// the node finds itself a replica of the promoted node in the stored map
// and resyncs from it (failover's "Demotion"). A primary without a live
// replica has nobody to fail over to: it is restarted at once, or after
// wait when the store cannot be read.
func AwaitCacheFailover(ctx context.Context, root string, addrs []string, id string, wait time.Duration, log *slog.Logger) error {
	op, err := operatorFiles(root)
	if err != nil {
		return err
	}
	client := &topology.Client{Addrs: addrs, Cluster: CacheCluster, TLS: op.ClientConfig(identity.Policy{Roles: []identity.Role{identity.KVNode}})}
	deadline := time.Now().Add(wait)
	logged := false
	for {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		t, err := client.Load(lctx)
		cancel()
		if err == nil {
			if !primaryWithReplica(t.Spec, id) {
				if logged {
					log.Info("its slots failed over; restarting it as a replica", "node", id, "epoch", t.Spec.Epoch)
				}
				return nil
			}
			if !logged {
				log.Info("holding the restart until its slots fail over (a primary restarted now would come back empty)",
					"node", id, "epoch", t.Spec.Epoch, "wait", wait)
				logged = true
			}
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("reading the cache topology: %w", err)
			}
			return fmt.Errorf("%s still owns slots after %v", id, wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// primaryWithReplica is true when node id owns slots in spec and one of its
// replicas is not failed.
func primaryWithReplica(spec cluster.Spec, id string) bool {
	owns := false
	for _, n := range spec.Nodes {
		if n.ID == id {
			owns = n.ReplicaOf == "" && len(n.Slots) > 0
		}
	}
	if !owns {
		return false
	}
	for _, n := range spec.Nodes {
		if n.ReplicaOf == id && !n.Failed {
			return true
		}
	}
	return false
}

// SecretKeyFile is the control plane's key sealing TLS private keys in a
// local run; it is made once and kept, so stored secrets stay readable
// across runs.
func SecretKeyFile(root string) string { return filepath.Join(root, ".run", "secret.key") }

// ensureSecretKey writes a new random key to path (mode 0600) unless a file
// is there already.
func ensureSecretKey(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("secret key: %w", err)
	}
	key, err := seal.NewKey()
	if err == nil {
		_, err = fmt.Fprintln(f, key)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("secret key: %w", err)
	}
	return nil
}

// Run starts everything, seeds the demo, and blocks until ctx is done,
// restarting any component that exits meanwhile; then it stops the
// processes (SIGTERM, SIGKILL after 10s) and returns. A component that
// exits before it was first ready fails the start: Run stops the others
// and returns why.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Root == "" {
		cfg.Root = "."
	}
	if cfg.AdminURL == "" {
		cfg.AdminURL = "https://localhost:18080"
	}
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	procs, err := Processes(cfg.Root, cfg.RateLimitStore)
	if err != nil {
		return err
	}
	logDir := filepath.Join(cfg.Root, ".run", "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	if err := ensureSecretKey(SecretKeyFile(cfg.Root)); err != nil {
		return err
	}
	if err := EnsurePKI(cfg.Root, cfg.Out, time.Now()); err != nil {
		return fmt.Errorf("platform certificates: %w", err)
	}
	if err := ensureAdminToken(cfg.Root, cfg.Out); err != nil {
		return err
	}
	renewCtx, stopRenew := context.WithCancel(ctx)
	defer stopRenew()
	go renewLoop(renewCtx, cfg.Root, cfg.Out)
	// The launcher calls the platform's TLS ports as the operator.
	op, err := operatorFiles(cfg.Root)
	if err != nil {
		return err
	}
	go func() { _ = op.Run(renewCtx) }()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: op.ClientConfig(identity.Policy{})}}
	pidFile := filepath.Join(cfg.Root, ".run", "launch.pid")
	if err := os.WriteFile(pidFile, []byte(fmt.Sprint(os.Getpid())), 0o644); err != nil {
		return err
	}
	defer os.Remove(pidFile)

	// The status file says what the supervisor knows, as it changes.
	status := newStatusWriter(cfg.Root, os.Getpid(), time.Now())
	log := slog.New(slog.NewTextHandler(cfg.Out, nil))
	sup := supervisor.New(supervisor.Config{Logger: log, OnChange: func(st []supervisor.Status) {
		if err := status.components(st); err != nil {
			log.Warn("writing the status file", "err", err)
		}
	}})
	if err := status.launcher(LauncherStarting); err != nil {
		return err
	}
	defer func() {
		_ = status.launcher(LauncherStopping)
		sup.Stop()
		if err := status.launcher(LauncherStopped); err != nil {
			log.Warn("writing the status file", "err", err)
		}
		fmt.Fprintln(cfg.Out, "portico: stopped")
	}()

	envoy := cfg.EnvoyBin
	if envoy == "" {
		envoy = os.Getenv("ENVOY_BIN")
	}
	if envoy == "" {
		envoy, _ = exec.LookPath("envoy")
	}
	if cfg.NoEnvoy {
		envoy = ""
	}
	supervise := func(p Process) error {
		err := sup.Start(ctx, supervisor.Child{Name: p.Name, Ports: p.Ports, BeforeRestart: p.BeforeRestart,
			Start: func(restart int) (*exec.Cmd, error) {
				c, err := start(p, logDir, restart)
				if err == nil && cfg.Started != nil {
					cfg.Started(p.Name, c.Process.Pid)
				}
				return c, err
			},
			Ready: func(ctx context.Context) error { return waitReady(ctx, client, p) }})
		if err != nil {
			return fmt.Errorf("%w (log: %s)", err, filepath.Join(logDir, p.Name+".log"))
		}
		return nil
	}
	for _, p := range procs {
		if p.Prepare != nil {
			if err := p.Prepare(ctx); err != nil {
				return err
			}
		}
		if err := supervise(p); err != nil {
			return err
		}
		fmt.Fprintf(cfg.Out, "portico: %-14s ready (log .run/logs/%s.log)\n", p.Name, p.Name)
	}
	if err := Seed(ctx, client, cfg.AdminURL); err != nil {
		return fmt.Errorf("seeding the demo configuration: %w", err)
	}
	if err := SeedTLS(ctx, client, cfg.AdminURL, cfg.Root); err != nil {
		return fmt.Errorf("seeding the demo HTTPS listener: %w", err)
	}
	bootstrap := filepath.Join(cfg.Root, "envoy", "bootstrap.yaml")
	if envoy != "" {
		// Envoy runs in Root: the bootstrap names envoy/sds/*.yaml, and
		// those name .run/pki/*, relative to the working directory.
		if !filepath.IsAbs(envoy) && strings.ContainsRune(envoy, filepath.Separator) {
			if envoy, err = filepath.Abs(envoy); err != nil {
				return err
			}
		}
		// Its listeners come from the demo config: :10000, :10443 (HTTPS)
		// and :6380 (redis proxy), with the admin :9901 and stats :19001.
		p := Process{Name: "envoy", Dir: cfg.Root, Args: []string{envoy, "-c", filepath.Join("envoy", "bootstrap.yaml"), "--log-level", "warn"},
			Ready: "http://127.0.0.1:9901/ready", Ports: []int{9901, 10000, DemoHTTPSPort, 6380, 19001}}
		if err := supervise(p); err != nil {
			return err
		}
		fmt.Fprintln(cfg.Out, "portico: envoy          ready on :10000 (admin :9901)")
	} else {
		fmt.Fprintf(cfg.Out, "portico: envoy is not installed (no envoy on PATH, ENVOY_BIN unset); start it yourself with:\n  envoy -c %s\n", bootstrap)
	}
	if err := status.launcher(LauncherRunning); err != nil {
		return err
	}
	fmt.Fprint(cfg.Out, nextSteps)
	if cfg.Ready != nil {
		cfg.Ready()
	}
	<-ctx.Done()
	return nil
}

const nextSteps = `
Portico is running. Every service port speaks TLS; .run/pki/ca.crt is the CA to trust. Next:
  curl -s -K .run/admin.curlrc https://localhost:18080/admin/v1/clusters | jq          # the demo config
  curl -s -K .run/admin.curlrc https://localhost:18080/admin/v1/config/versions | jq   # its versions
  curl -s -K .run/admin.curlrc https://localhost:18080/admin/v1/nodes | jq             # xDS clients, ACK/NACK
  curl -s -K .run/admin.curlrc -X POST https://localhost:18080/admin/v1/clusters -H 'Idempotency-Key: more1' \
       -d '{"name":"more","endpoints":[{"address":"127.0.0.1","port":18901}]}'
  curl -s localhost:10000/echo                            # through Envoy, when it runs
  curl -s --cacert .run/demo-tls/ca.crt https://localhost:10443/public   # HTTPS, certificate by SDS
  curl -s -K .run/admin.curlrc -X POST https://localhost:18300/v1/jobs -H 'Idempotency-Key: j1' -d @job.json   # scheduler (see scheduler/README.md)
  curl -s -K .run/admin.curlrc -X PUT 'https://localhost:18400/v1/kv/hello?consistency=QUORUM' -d world    # kvnode ring (18400-18402)
  curl -s -K .run/admin.curlrc 'https://localhost:18401/v1/kv/hello?consistency=QUORUM'
  curl -s -K .run/admin.curlrc -X PUT https://localhost:18400/v1/cp/locks/leader -H 'If-Match: 0' -d me  # Raft tier (keyspace locks): CAS, create-only
  curl -si -K .run/admin.curlrc https://localhost:18401/v1/kv/locks:leader                               # the same key through /v1/kv/, linearizable
  redis-cli --tls --cacert .run/pki/ca.crt -c -p 7000 SET greeting hi EX 60   # cache cluster (7000-7005)
  redis-cli --tls --cacert .run/pki/ca.crt -c -p 7001 GET greeting
  PORTICO_TLS_CERT_FILE=.run/pki/operator.crt PORTICO_TLS_KEY_FILE=.run/pki/operator.key PORTICO_TLS_CA_FILE=.run/pki/ca.crt \
    bin/cachectl --cluster portico topology get                             # its slot map (3 primaries, 3 replicas)
  redis-cli -p 6380 GET greeting                                            # the cache through Envoy's redis proxy, when Envoy runs
  bin/launch status                                                         # (make status) each component's state, pid, restarts, ports
A component that exits is restarted (after a backoff; a cache primary once its replica is promoted).
Ctrl-C stops everything (or 'make stop' from another shell).
`

// start starts p's process, its output going to .run/logs/<name>.log: a
// new log for the first process, the same one, appended to after a marker
// line, for a restart (the crash stays readable above it).
func start(p Process, logDir string, restart int) (*exec.Cmd, error) {
	name := filepath.Join(logDir, p.Name+".log")
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if restart > 0 {
		flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
	}
	f, err := os.OpenFile(name, flags, 0o644)
	if err != nil {
		return nil, err
	}
	if restart > 0 {
		fmt.Fprintf(f, "\n--- portico launcher: restart %d of %s at %s ---\n", restart, p.Name, time.Now().Format(time.RFC3339))
	}
	// No context: the supervisor stops children in order (SIGTERM to the
	// group, then a grace period), which killing on a cancelled ctx would skip.
	c := exec.Command(p.Args[0], p.Args[1:]...) //nolint:noctx // see above
	c.Stdout, c.Stderr = f, f
	c.Dir = p.Dir
	c.Env = append(os.Environ(), p.Env...)
	// Own process group: Ctrl-C reaches the launcher, which stops children in order.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = c.Start()
	// The child has its own copy of the file (or never started).
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", p.Name, err)
	}
	return c, nil
}

// readyTimeout bounds one wait for a process's readiness.
const readyTimeout = 60 * time.Second

// waitReady polls p.Ready with client (which trusts the platform CA, for
// the readiness endpoints on TLS ports) until it answers 2xx, ctx ends
// (the supervisor ends it when the process exits) or readyTimeout passes.
func waitReady(ctx context.Context, client *http.Client, p Process) error {
	if p.Ready == "" {
		return nil
	}
	deadline := time.Now().Add(readyTimeout)
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, p.Ready, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		cancel()
		if err == nil && resp.StatusCode/100 == 2 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v at %s", p.Name, readyTimeout, p.Ready)
		}
	}
}

// demo is the seeded configuration, in dependency order.
var demo = []struct{ path, body string }{
	{"/admin/v1/clusters", `{"name":"echo","endpoints":[{"address":"127.0.0.1","port":18900}],
		"outlierDetection":{"consecutive5xx":5,"interval":"10s","baseEjectionTime":"30s","maxEjectionPercent":50},
		"circuitBreakers":{"maxRequests":1024,"maxPendingRequests":256,"retryBudget":{"budgetPercent":20}}}`},
	// A local development IdP: plain http JWKS on loopback, allowed explicitly.
	{"/admin/v1/jwt-providers", `{"name":"idp","issuer":"https://idp.test","audiences":["portico"],
		"jwksUri":"http://127.0.0.1:18950/jwks.json","allowInsecureLoopback":true,"algorithms":["RS256","ES256"]}`},
	{"/admin/v1/routes", `{"name":"echo","match":{"pathPrefix":"/echo"},"cluster":"echo","timeout":"5s",
		"retries":{"retryOn":["5xx","connect-failure"],"numRetries":2,"perTryTimeout":"1s"},
		"auth":{"mode":"jwt","provider":"idp","requiredScopes":["echo:read"]},
		"rateLimits":[{"descriptors":[{"key":"consumer","fromHeader":"x-portico-consumer"}]}]}`},
	{"/admin/v1/routes", `{"name":"public","match":{"pathPrefix":"/public"},"cluster":"echo","auth":{"mode":"none"}}`},
	{"/admin/v1/routes", `{"name":"keyed","match":{"pathPrefix":"/keyed"},"cluster":"echo","timeout":"5s",
		"auth":{"mode":"apikey"},"rateLimits":[{"descriptors":[{"key":"consumer","fromHeader":"x-portico-consumer"}]}]}`},
	{"/admin/v1/consumers", `{"name":"acme","tenant":"acme","tier":"pro"}`},
	// Envoy's Redis Cluster proxy in front of the cache cluster, for
	// clients that cannot follow MOVED/ASK themselves.
	{"/admin/v1/redis-proxies", `{"name":"cache","listen":{"address":"127.0.0.1","port":6380},
		"cluster":{"seeds":[{"address":"127.0.0.1","port":7000},{"address":"127.0.0.1","port":7001},{"address":"127.0.0.1","port":7002}],
		"platformTLS":true}}`},
	{"/admin/v1/ratelimit-rules", `{"name":"per-consumer","domain":"portico","descriptors":[{"key":"consumer"}],"limit":5,"window":"1s","burst":5}`},
}

// Seed creates the demo configuration with client (the admin API is TLS).
// It is idempotent: resources that already exist are left as they are.
func Seed(ctx context.Context, client *http.Client, adminURL string) error {
	for _, d := range demo {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, adminURL+d.path, strings.NewReader(d.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", fmt.Sprintf("portico-demo-%x", sha256.Sum256([]byte(d.path+d.body))))
		req.Header.Set("X-Portico-Author", "make-run")
		req.Header.Set("X-Portico-Reason", "demo configuration")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode/100 == 2, resp.StatusCode == http.StatusConflict:
		default:
			var e struct {
				Error struct{ Code, Message, Field string } `json:"error"`
			}
			_ = json.Unmarshal(body, &e)
			return fmt.Errorf("POST %s: %d %s %s", d.path, resp.StatusCode, e.Error.Code, bytes.TrimSpace([]byte(e.Error.Message)))
		}
	}
	return nil
}
