// Package launcher is what `make run` runs: it starts every Portico
// component built so far as its own OS process, waits for each to be ready,
// seeds a demo configuration through the admin API, prints what to do next,
// and stops everything on Ctrl-C or SIGTERM (`make stop`).
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
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/reshard"
	"github.com/portico-io/portico/cachenode/topology"
	"github.com/portico-io/portico/controlplane/seal"
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
	// Started, when set, is told each process's pid as it starts (tests
	// inspect what it listens on).
	Started func(name string, pid int)
	// Ready, when set, is called once everything is up and seeded.
	Ready func()
}

// Process is one component to start.
type Process struct {
	Name string
	Args []string
	Env  []string
	// Ready is polled (HTTP GET, 2xx) before the next process starts.
	Ready string
	// Dir is the working directory; empty is the launcher's.
	Dir string
	// Prepare, when set, runs before the process starts.
	Prepare func(ctx context.Context) error
}

// Processes lists what `make run` starts, in order. Later components are
// added here as they land.
func Processes(root string) []Process {
	bin := func(n string) string { return filepath.Join(root, "bin", n) }
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
			Ready: "https://localhost:18080/readyz"},
		{Name: "extauthz", Args: append([]string{bin("extauthz"), "--log-format=text", "--state-dir=" + filepath.Join(root, ".run", "extauthz")},
			TLSArgs(root, "extauthz")...),
			Ready: "http://127.0.0.1:18101/readyz"},
		{Name: "ratelimitsvc", Args: append([]string{bin("ratelimitsvc"), "--log-format=text", "--state-dir=" + filepath.Join(root, ".run", "ratelimitsvc")},
			TLSArgs(root, "ratelimitsvc")...),
			Env: []string{"PORTICO_REDIS_ADDR=127.0.0.1:56379", "PORTICO_XDS_ADDR=127.0.0.1:18000"}, Ready: "http://127.0.0.1:18201/readyz"},
		{Name: "echo-upstream", Args: []string{bin("echo-upstream"), "--addr=127.0.0.1:18900"}, Ready: "http://127.0.0.1:18900/healthz"},
		// The worker API (:18301) admits worker certificates only.
		{Name: "scheduler", Args: append([]string{bin("scheduler"), "--log-format=text", "--admin-token-file=" + AdminTokenFile(root)},
			TLSArgs(root, "scheduler")...),
			Env: []string{"PORTICO_SCHEDULER_TARGET_ALLOWLIST=127.0.0.0/8"}, Ready: "https://localhost:18300/readyz"},
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
			Ready: fmt.Sprintf("https://localhost:%d/readyz", 18400+i)})
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
			Ready: fmt.Sprintf("http://127.0.0.1:%d/readyz", 18700+i)}
		if i == 0 {
			p.Prepare = func(ctx context.Context) error { return EnsureCacheTopology(ctx, root, kvAddrs) }
		}
		ps = append(ps, p)
	}
	return ps
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

// Run starts everything, seeds the demo, and blocks until ctx is done; then
// it stops the processes (SIGTERM, SIGKILL after 10s) and returns.
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

	var running []*exec.Cmd
	var wg sync.WaitGroup
	exited := make(chan string, 16)
	defer func() {
		for i := len(running) - 1; i >= 0; i-- {
			_ = running[i].Process.Signal(syscall.SIGTERM)
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			for _, c := range running {
				_ = c.Process.Kill()
			}
			<-done
		}
		fmt.Fprintln(cfg.Out, "portico: stopped")
	}()

	procs := Processes(cfg.Root)
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
	for _, p := range procs {
		if p.Prepare != nil {
			if err := p.Prepare(ctx); err != nil {
				return err
			}
		}
		c, err := start(p, logDir)
		if err != nil {
			return err
		}
		running = append(running, c)
		if cfg.Started != nil {
			cfg.Started(p.Name, c.Process.Pid)
		}
		wg.Add(1)
		go func(name string) { defer wg.Done(); _ = c.Wait(); exited <- name }(p.Name)
		if err := waitReady(ctx, client, p, exited); err != nil {
			return fmt.Errorf("%w (log: %s)", err, filepath.Join(logDir, p.Name+".log"))
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
		p := Process{Name: "envoy", Dir: cfg.Root, Args: []string{envoy, "-c", filepath.Join("envoy", "bootstrap.yaml"), "--log-level", "warn"},
			Ready: "http://127.0.0.1:9901/ready"}
		c, err := start(p, logDir)
		if err != nil {
			return err
		}
		running = append(running, c)
		if cfg.Started != nil {
			cfg.Started(p.Name, c.Process.Pid)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.Wait(); exited <- "envoy" }()
		if err := waitReady(ctx, client, p, exited); err != nil {
			return err
		}
		fmt.Fprintln(cfg.Out, "portico: envoy          ready on :10000 (admin :9901)")
	} else {
		fmt.Fprintf(cfg.Out, "portico: envoy is not installed (no envoy on PATH, ENVOY_BIN unset); start it yourself with:\n  envoy -c %s\n", bootstrap)
	}
	fmt.Fprint(cfg.Out, nextSteps)
	if cfg.Ready != nil {
		cfg.Ready()
	}
	select {
	case <-ctx.Done():
		return nil
	case name := <-exited:
		return fmt.Errorf("%s exited; see .run/logs/%s.log", name, name)
	}
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
Ctrl-C stops everything (or 'make stop' from another shell).
`

func start(p Process, logDir string) (*exec.Cmd, error) {
	f, err := os.Create(filepath.Join(logDir, p.Name+".log"))
	if err != nil {
		return nil, err
	}
	c := exec.Command(p.Args[0], p.Args[1:]...)
	c.Stdout, c.Stderr = f, f
	c.Dir = p.Dir
	c.Env = append(os.Environ(), p.Env...)
	// Own process group: Ctrl-C reaches the launcher, which stops children in order.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", p.Name, err)
	}
	return c, nil
}

// waitReady polls p.Ready with client (which trusts the platform CA, for the
// readiness endpoints on TLS ports).
func waitReady(ctx context.Context, client *http.Client, p Process, exited <-chan string) error {
	if p.Ready == "" {
		return nil
	}
	deadline := time.Now().Add(60 * time.Second)
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
		case name := <-exited:
			return fmt.Errorf("%s exited before it was ready", name)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after 60s at %s", p.Name, p.Ready)
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
