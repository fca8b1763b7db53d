package cp_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/peerbench"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlstest"
)

// The workload both sides run: the same HTTP/1.1 keep-alive client over
// TLS, the same concurrency, keys and values, each client pinned to one
// member (client i → member i mod 3), as a client balancing over the
// endpoints would.
const (
	cpBenchClients = 16
	cpBenchKeys    = 100
	cpBenchValue   = 256
	// Each comparison runs cpBenchRounds rounds of cpBenchPhase per side,
	// in peerbench.Order, after cpBenchWarmup of each side, unmeasured.
	cpBenchRounds = 4
	cpBenchPhase  = 2 * time.Second
	cpBenchWarmup = 2 * time.Second
)

// kvTarget is one system under test.
type kvTarget interface {
	// put writes key unconditionally.
	put(ctx context.Context, member int, key string, val []byte) error
	// cas reads key's revision linearizably, then writes val only if the
	// revision is unchanged; applied is false on a lost race.
	cas(ctx context.Context, member int, key string, val []byte) (applied bool, err error)
}

// roundStats is one round of one side.
type roundStats struct {
	opsPerSec      float64
	p50, p99       time.Duration
	ops, conflicts int
	// cpuPerOp is the CPU time (user+system) the side's three server
	// processes used during the round, per completed operation.
	cpuPerOp time.Duration
}

func (r roundStats) String() string {
	return fmt.Sprintf("%7.0f ops/s  p50 %8s  p99 %8s  cpu %6.0f µs/op", r.opsPerSec,
		r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond), float64(r.cpuPerOp)/float64(time.Microsecond))
}

// runPhase runs op from cpBenchClients clients for d and summarises the
// latencies of the operations that finished in time.
func runPhase(d time.Duration, op func(ctx context.Context, r *rand.Rand, client int) (conflict bool, err error)) (roundStats, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu        sync.Mutex
		all       []time.Duration
		conflicts int
		firstErr  error
		wg        sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	for c := range cpBenchClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(c), uint64(start.UnixNano())))
			var lat []time.Duration
			conf := 0
			var err error
			for time.Now().Before(deadline) {
				t0 := time.Now()
				var lost bool
				if lost, err = op(ctx, r, c); err != nil {
					cancel()
					break
				}
				lat = append(lat, time.Since(t0))
				if lost {
					conf++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			all = append(all, lat...)
			conflicts += conf
			if err != nil && firstErr == nil && !errors.Is(err, context.Canceled) {
				firstErr = err
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return roundStats{}, firstErr
	}
	if len(all) == 0 {
		return roundStats{}, errors.New("no operation finished")
	}
	slices.Sort(all)
	return roundStats{
		opsPerSec: float64(len(all)) / elapsed.Seconds(),
		p50:       all[len(all)/2],
		p99:       all[len(all)*99/100],
		ops:       len(all),
		conflicts: conflicts,
	}, nil
}

func benchPut(t kvTarget, val []byte) func(context.Context, *rand.Rand, int) (bool, error) {
	return func(ctx context.Context, r *rand.Rand, c int) (bool, error) {
		return false, t.put(ctx, c%3, "k"+strconv.Itoa(r.IntN(cpBenchKeys)), val)
	}
}

func benchCAS(t kvTarget, val []byte) func(context.Context, *rand.Rand, int) (bool, error) {
	return func(ctx context.Context, r *rand.Rand, c int) (bool, error) {
		ok, err := t.cas(ctx, c%3, "k"+strconv.Itoa(r.IntN(cpBenchKeys)), val)
		return !ok, err
	}
}

// httpDo sends one request and returns the status and body.
func httpDo(ctx context.Context, c *http.Client, method, url string, body []byte, hdr map[string]string) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

// benchClient is the HTTP client of both sides: HTTP/1.1 keep-alive over
// TLS (a transport with its own TLS config does not try HTTP/2), up to one
// idle connection per client and member, verifying the server's
// certificate against tc's roots.
func benchClient(tc *tls.Config) *http.Client {
	return &http.Client{
		Transport: &http.Transport{TLSClientConfig: tc.Clone(), MaxIdleConns: 4 * cpBenchClients, MaxIdleConnsPerHost: cpBenchClients},
		Timeout:   10 * time.Second,
	}
}

// cpTarget is our consensus tier through its public API, as a user calls
// it: PUT https://…/v1/cp/bench/{key} with a bearer token; CAS is a GET
// (linearizable) for the ETag, then PUT with If-Match ("0": must not
// exist).
type cpTarget struct {
	urls   []string // https://host:port by member
	auth   map[string]string
	client *http.Client
}

func (t *cpTarget) put(ctx context.Context, m int, key string, val []byte) error {
	st, _, body, err := httpDo(ctx, t.client, http.MethodPut, t.urls[m]+"/v1/cp/bench/"+key, val, t.auth)
	if err == nil && st != http.StatusOK {
		err = fmt.Errorf("cp put: %d %s", st, body)
	}
	return err
}

func (t *cpTarget) cas(ctx context.Context, m int, key string, val []byte) (bool, error) {
	url := t.urls[m] + "/v1/cp/bench/" + key
	st, hdr, body, err := httpDo(ctx, t.client, http.MethodGet, url, nil, t.auth)
	if err != nil {
		return false, err
	}
	etag := "0"
	switch st {
	case http.StatusOK:
		etag = hdr.Get("ETag")
	case http.StatusNotFound:
	default:
		return false, fmt.Errorf("cp get: %d %s", st, body)
	}
	h := map[string]string{"If-Match": etag}
	for k, v := range t.auth {
		h[k] = v
	}
	st, _, body, err = httpDo(ctx, t.client, http.MethodPut, url, val, h)
	switch {
	case err != nil:
		return false, err
	case st == http.StatusOK:
		return true, nil
	case st == http.StatusPreconditionFailed:
		return false, nil
	}
	return false, fmt.Errorf("cp cas: %d %s", st, body)
}

// etcdTarget is etcd's gRPC-gateway (JSON over HTTP/1.1, keys and values
// base64): POST /v3/kv/put; CAS is POST /v3/kv/range (linearizable, the
// default) for mod_revision, then POST /v3/kv/txn comparing mod_revision.
// With auth on, the token goes in the Authorization header.
type etcdTarget struct {
	urls   []string // https://host:port by member
	token  string
	client *http.Client
}

func b64(s []byte) string { return base64.StdEncoding.EncodeToString(s) }

func (t *etcdTarget) post(ctx context.Context, m int, path string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	hdr := map[string]string{"Content-Type": "application/json"}
	if t.token != "" {
		hdr["Authorization"] = t.token
	}
	st, _, out, err := httpDo(ctx, t.client, http.MethodPost, t.urls[m]+path, body, hdr)
	if err != nil {
		return err
	}
	if st != http.StatusOK {
		return fmt.Errorf("etcd %s: %d %s", path, st, out)
	}
	if resp == nil {
		return nil
	}
	return json.Unmarshal(out, resp)
}

func (t *etcdTarget) put(ctx context.Context, m int, key string, val []byte) error {
	return t.post(ctx, m, "/v3/kv/put", map[string]string{"key": b64([]byte("bench/" + key)), "value": b64(val)}, nil)
}

func (t *etcdTarget) cas(ctx context.Context, m int, key string, val []byte) (bool, error) {
	k := b64([]byte("bench/" + key))
	var rng struct {
		Kvs []struct {
			ModRevision string `json:"mod_revision"`
		} `json:"kvs"`
	}
	if err := t.post(ctx, m, "/v3/kv/range", map[string]string{"key": k}, &rng); err != nil {
		return false, err
	}
	rev := "0"
	if len(rng.Kvs) > 0 {
		rev = rng.Kvs[0].ModRevision
	}
	var txn struct {
		Succeeded bool `json:"succeeded"`
	}
	err := t.post(ctx, m, "/v3/kv/txn", map[string]any{
		"compare": []map[string]string{{"target": "MOD", "result": "EQUAL", "key": k, "mod_revision": rev}},
		"success": []map[string]any{{"request_put": map[string]string{"key": k, "value": b64(val)}}},
	}, &txn)
	return txn.Succeeded, err
}

// etcdBin is the etcd binary `make etcd` builds (PORTICO_ETCD_BIN). The
// benchmark is skipped without it, except under CI, where that fails.
func etcdBin(b *testing.B) string {
	bin := os.Getenv("PORTICO_ETCD_BIN")
	if bin == "" {
		bin = "../../.run/bin/etcd"
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") != "" {
			b.Fatalf("etcd binary %q missing (run make etcd): %v", bin, err)
		}
		b.Skipf("etcd binary %q missing (run make etcd)", bin)
	}
	return bin
}

// benchSide is one system of the comparison: how to call it and the
// processes whose CPU it is charged.
type benchSide struct {
	name  string
	t     kvTarget
	procs []*peerbench.Proc
}

// cpu is the CPU time the side's processes have used so far; a process
// that exited fails the benchmark.
func (s benchSide) cpu(b *testing.B) time.Duration {
	var sum time.Duration
	for _, p := range s.procs {
		select {
		case <-p.Exited():
			b.Fatalf("%s exited:\n%s", p.Name, p.Output())
		default:
		}
		sum += peerbench.CPUTime(p.Pid())
	}
	return sum
}

// waitWritable waits until t accepts a put on every member; it fails the
// benchmark after a minute (with the last error) or when a process exited.
func waitWritable(b *testing.B, what string, t kvTarget, procs []*peerbench.Proc) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	dead := exited(procs)
	for {
		var err error
		for m := 0; m < 3 && err == nil; m++ {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err = t.put(ctx, m, "ready", []byte("1"))
			cancel()
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("waiting for %s: %v", what, err)
		}
		select {
		case <-tick.C:
		case <-dead:
			for _, p := range procs {
				select {
				case <-p.Exited():
					b.Fatalf("waiting for %s: %s exited:\n%s", what, p.Name, p.Output())
				default:
				}
			}
		}
	}
}

// exited is closed once any of procs has exited.
func exited(procs []*peerbench.Proc) <-chan struct{} {
	ch := make(chan struct{})
	var once sync.Once
	for _, p := range procs {
		go func() {
			<-p.Exited()
			once.Do(func() { close(ch) })
		}()
	}
	return ch
}

// startKVNodes starts three kvnode processes from the real command
// (kvnode/cmd/kvnode, built from this source), as make run starts them:
// each with its own kvnode certificate of ca (HTTP API, internode gRPC and
// Raft on TLS), all bootstrapping the same three Raft voters and sharing
// one bootstrap admin token file, data in temp dirs, fsync on (the command
// has no way to turn it off). It returns the side, called over HTTPS with
// that token, once every member accepts a write.
func startKVNodes(b *testing.B, ca *tlstest.PKI, client *http.Client) benchSide {
	b.Helper()
	bin := peerbench.Build(b, "./kvnode/cmd/kvnode")
	dir := b.TempDir()
	tokenFile := filepath.Join(dir, "admin-token")
	tok, _, err := authn.BootstrapToken(tokenFile)
	if err != nil {
		b.Fatal(err)
	}
	addrs := testdeps.FreeAddrs(b, 9)
	var ids, peers, urls []string
	for i := range 3 {
		ids = append(ids, fmt.Sprintf("kv-%d", i))
		peers = append(peers, ids[i]+"="+addrs[3*i+2])
		urls = append(urls, "https://"+addrs[3*i])
	}
	var procs []*peerbench.Proc
	for i := range 3 {
		var seeds []string
		for j := range 3 {
			if j != i {
				seeds = append(seeds, addrs[3*j+1])
			}
		}
		tc := ca.Files(b, identity.KVNode, ids[i])
		cmd := exec.Command(bin, "--log-format=text", "--log-level=warn", "--node-id="+ids[i],
			"--http-addr="+addrs[3*i], "--grpc-addr="+addrs[3*i+1], "--raft-addr="+addrs[3*i+2],
			"--data-dir="+filepath.Join(dir, ids[i]), "--seeds="+strings.Join(seeds, ","), "--startup-wait=1s",
			"--raft-bootstrap", "--raft-peers="+strings.Join(peers, ","), "--cp-keyspaces=bench",
			"--tls-cert-file="+tc.CertFile, "--tls-key-file="+tc.KeyFile, "--tls-ca-file="+tc.CAFile,
			"--admin-token-file="+tokenFile)
		procs = append(procs, peerbench.Start(b, ids[i], cmd))
	}
	t := &cpTarget{urls: urls, auth: map[string]string{"Authorization": "Bearer " + tok.Plaintext}, client: client}
	waitWritable(b, "kvnode to accept writes on every member", t, procs)
	return benchSide{name: "kvnode", t: t, procs: procs}
}

// startEtcd starts a 3-member etcd cluster, each member its own process,
// on the same conditions as startKVNodes: client and peer URLs on TLS
// with certificates of the same CA (peers verifying each other's
// certificate, as kvnode's Raft transport does; clients not required to
// present one, as kvnode's API does not), auth on with a root user whose
// token the clients send on every request, data in temp dirs and fsync on
// (etcd's default). It returns the gateway side and the members' client
// addresses (host:port) and token for the gRPC side.
func startEtcd(b *testing.B, bin string, ca *tlstest.PKI, client *http.Client) (side benchSide, addrs []string, token string) {
	b.Helper()
	ports := testdeps.FreeAddrs(b, 6)
	var initial, urls []string
	for i := range 3 {
		initial = append(initial, fmt.Sprintf("e%d=https://%s", i, ports[2*i+1]))
	}
	var procs []*peerbench.Proc
	for i := range 3 {
		client, peer := ports[2*i], ports[2*i+1]
		addrs = append(addrs, client)
		urls = append(urls, "https://"+client)
		tc := ca.Files(b, identity.KVNode, fmt.Sprintf("etcd-%d", i))
		cmd := exec.Command(bin,
			"--name", fmt.Sprintf("e%d", i),
			"--data-dir", b.TempDir(),
			"--listen-client-urls", "https://"+client,
			"--advertise-client-urls", "https://"+client,
			"--cert-file", tc.CertFile, "--key-file", tc.KeyFile,
			"--listen-peer-urls", "https://"+peer,
			"--initial-advertise-peer-urls", "https://"+peer,
			"--peer-cert-file", tc.CertFile, "--peer-key-file", tc.KeyFile,
			"--peer-trusted-ca-file", tc.CAFile, "--peer-client-cert-auth",
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", "portico-bench",
			"--log-level", "warn",
		)
		procs = append(procs, peerbench.Start(b, fmt.Sprintf("etcd-e%d", i), cmd))
	}
	t := &etcdTarget{urls: urls, client: client}
	waitWritable(b, "etcd to accept writes on every member", t, procs)
	// Auth on, as on a cluster users share: the root user (etcd's admin,
	// as the bootstrap token is kvnode's) and a simple token, which etcd
	// keeps alive while it is used.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, step := range []struct {
		path string
		req  any
	}{
		{"/v3/auth/user/add", map[string]string{"name": "root", "password": "portico-bench"}},
		{"/v3/auth/user/grant", map[string]string{"user": "root", "role": "root"}},
		{"/v3/auth/enable", map[string]string{}},
	} {
		if err := t.post(ctx, 0, step.path, step.req, nil); err != nil {
			b.Fatalf("etcd auth: %v", err)
		}
	}
	var auth struct {
		Token string `json:"token"`
	}
	if err := t.post(ctx, 0, "/v3/auth/authenticate", map[string]string{"name": "root", "password": "portico-bench"}, &auth); err != nil || auth.Token == "" {
		b.Fatalf("etcd authenticate: %v (token %q)", err, auth.Token)
	}
	t.token = auth.Token
	waitWritable(b, "etcd to accept the token on every member", t, procs)
	return benchSide{name: "etcd (gateway)", t: t, procs: procs}, addrs, auth.Token
}

// compare runs one sub-benchmark: a warm-up of each side, then
// cpBenchRounds rounds per side in peerbench order, every round logged,
// and the reported means and ratios.
func compare(b *testing.B, ours, peer benchSide, workload string, op func(kvTarget) func(context.Context, *rand.Rand, int) (bool, error)) {
	b.Helper()
	phase := func(s benchSide, d time.Duration) roundStats {
		cpu0 := s.cpu(b)
		r, err := runPhase(d, op(s.t))
		if err != nil {
			b.Fatalf("%s %s: %v", s.name, workload, err)
		}
		r.cpuPerOp = (s.cpu(b) - cpu0) / time.Duration(r.ops)
		return r
	}
	phase(ours, cpBenchWarmup)
	phase(peer, cpBenchWarmup)
	b.Logf("%s, 3 processes per side, TLS, tokens and fsync on both; %d clients over 3 members, %d keys, %d B values; %d rounds of %s per side (ours, peer, peer, ours, …); %s",
		workload, cpBenchClients, cpBenchKeys, cpBenchValue, cpBenchRounds, cpBenchPhase, peerbench.Machine())
	run := func(s benchSide) func(int) roundStats {
		return func(i int) roundStats {
			r := phase(s, cpBenchPhase)
			lost := ""
			if workload == "cas" {
				lost = fmt.Sprintf("  lost CAS %d", r.conflicts)
			}
			b.Logf("round %d %-15s %s%s", i+1, s.name+":", r, lost)
			return r
		}
	}
	o, p := peerbench.Rounds(cpBenchRounds, run(ours), run(peer))
	µs := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	peerbench.ReportMetrics(b, o, p, []peerbench.Metric[roundStats]{
		{Name: "throughput", Unit: "ops/s", Of: func(r roundStats) float64 { return r.opsPerSec }},
		{Name: "p50", Unit: "p50-µs", Of: func(r roundStats) float64 { return µs(r.p50) }},
		{Name: "p99", Unit: "p99-µs", Of: func(r roundStats) float64 { return µs(r.p99) }},
		{Name: "cpu", Unit: "cpu-µs/op", Of: func(r roundStats) float64 { return µs(r.cpuPerOp) }},
	})
}

// BenchmarkCPVsEtcd measures put and CAS (a linearizable read of the
// revision, then a conditional put) on a 3-node kvnode consensus group and
// on a 3-member etcd 3.7 cluster, in the same run on the same machine,
// with the same clients, keys and values, against etcd's HTTP/JSON gateway
// and its native gRPC API (one sub-benchmark per workload and etcd API).
//
// Both sides are three processes of their real commands (kvnode's built
// from this source) on loopback, on the same terms:
//   - TLS on every port: the client API (HTTP/1.1 keep-alive, the same
//     client, server certificate verified, none presented) and the
//     consensus traffic between members (mutual TLS), with certificates
//     of one CA;
//   - a token on every request: kvnode's bootstrap admin token (Bearer),
//     etcd's root user's simple token (auth enabled);
//   - fsync on both sides, each at its default: ours syncs every Raft log
//     append on the leader and on each follower (raftlog: one synced
//     pebble batch per StoreLogs) and term/vote changes, the state being
//     in memory; etcd its WAL on the leader and each follower (one fsync
//     per Raft Ready batch), its bbolt backend committed every 100 ms;
//   - everything else at each side's defaults (Raft timings, snapshots).
//
// A CAS that loses the race to another client counts as a completed
// operation on both sides; the lost ones are logged per round.
//
// Reported per sub-benchmark: each side's mean ops/s, p50, p99 and server
// CPU per operation (the three processes' user+system time over the
// round ÷ operations), and the ratios ours/etcd over round pairs
// (throughput-ratio: > 1 favours kvnode; p50-, p99-, cpu-ratio: < 1
// does). ns/op is meaningless (both sides, every round, run in one op).
//
//	make etcd && go test -run '^$' -bench CPVsEtcd -benchtime 1x ./kvnode/cp/
func BenchmarkCPVsEtcd(b *testing.B) {
	bin := etcdBin(b)
	ca := tlstest.New(b)
	tc := ca.ClientTLS(nil)
	ours := startKVNodes(b, ca, benchClient(tc))
	gateway, etcdAddrs, token := startEtcd(b, bin, ca, benchClient(tc))
	rpc, err := newEtcdGRPCTarget(etcdAddrs, tc, token)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rpc.close)
	grpcSide := benchSide{name: "etcd (gRPC)", t: rpc, procs: gateway.procs}
	val := bytes.Repeat([]byte("v"), cpBenchValue)
	for _, w := range []struct {
		name string
		op   func(kvTarget) func(context.Context, *rand.Rand, int) (bool, error)
	}{
		{"put", func(t kvTarget) func(context.Context, *rand.Rand, int) (bool, error) { return benchPut(t, val) }},
		{"cas", func(t kvTarget) func(context.Context, *rand.Rand, int) (bool, error) { return benchCAS(t, val) }},
	} {
		for _, peer := range []struct {
			name string
			side benchSide
		}{{"etcd=gateway", gateway}, {"etcd=grpc", grpcSide}} {
			b.Run(w.name+"/"+peer.name, func(b *testing.B) {
				for range b.N {
					compare(b, ours, peer.side, w.name, w.op)
				}
			})
		}
	}
}
