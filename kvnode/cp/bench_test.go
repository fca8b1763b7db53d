package cp_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/kvnode/cp"
)

// The workload both sides run: the same HTTP/1.1 keep-alive client shape,
// the same concurrency, keys and values, each client pinned to one member
// (client i → member i mod 3), as a client balancing over the endpoints
// would.
const (
	cpBenchClients = 16
	cpBenchKeys    = 100
	cpBenchValue   = 256
	// Each side runs each workload cpBenchRounds times for cpBenchPhase,
	// the sides alternating, so a change in the machine's load (it is
	// shared) falls on both; cpBenchWarmup runs first, unmeasured.
	cpBenchRounds = 3
	cpBenchPhase  = 2 * time.Second
	cpBenchWarmup = time.Second
)

// kvTarget is one system under test, driven over HTTP/JSON.
type kvTarget interface {
	// put writes key unconditionally.
	put(ctx context.Context, member int, key string, val []byte) error
	// cas reads key's revision linearizably, then writes val only if the
	// revision is unchanged; applied is false on a lost race.
	cas(ctx context.Context, member int, key string, val []byte) (applied bool, err error)
}

type phaseStats struct {
	opsPerSec      float64
	p50, p99       time.Duration
	ops, conflicts int
	lat            []time.Duration // sorted
	elapsed        time.Duration
}

// merge pools rounds: throughput over their total time, percentiles over
// all their latencies.
func merge(rounds []phaseStats) phaseStats {
	var m phaseStats
	for _, r := range rounds {
		m.lat = append(m.lat, r.lat...)
		m.elapsed += r.elapsed
		m.ops += r.ops
		m.conflicts += r.conflicts
	}
	slices.Sort(m.lat)
	m.opsPerSec = float64(m.ops) / m.elapsed.Seconds()
	m.p50, m.p99 = m.lat[len(m.lat)/2], m.lat[len(m.lat)*99/100]
	return m
}

// runPhase runs op from cpBenchClients clients for d and summarises the
// latencies of the operations that finished in time.
func runPhase(d time.Duration, op func(ctx context.Context, r *rand.Rand, client int) (conflict bool, err error)) (phaseStats, error) {
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
			r := rand.New(rand.NewPCG(uint64(c), 7))
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
		return phaseStats{}, firstErr
	}
	if len(all) == 0 {
		return phaseStats{}, errors.New("no operation finished")
	}
	slices.Sort(all)
	return phaseStats{
		opsPerSec: float64(len(all)) / elapsed.Seconds(),
		p50:       all[len(all)/2],
		p99:       all[len(all)*99/100],
		ops:       len(all),
		conflicts: conflicts,
		lat:       all,
		elapsed:   elapsed,
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

func benchClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{MaxIdleConns: 4 * cpBenchClients, MaxIdleConnsPerHost: cpBenchClients},
		Timeout:   10 * time.Second,
	}
}

// cpTarget is our consensus tier: PUT /v1/cp/bench/{key}; CAS is a GET
// (linearizable) for the ETag, then PUT with If-Match.
type cpTarget struct {
	addrs  []string
	client *http.Client
}

func (t *cpTarget) put(ctx context.Context, m int, key string, val []byte) error {
	st, _, body, err := httpDo(ctx, t.client, http.MethodPut, "http://"+t.addrs[m]+"/v1/cp/bench/"+key, val, nil)
	if err == nil && st != http.StatusOK {
		err = fmt.Errorf("cp put: %d %s", st, body)
	}
	return err
}

func (t *cpTarget) cas(ctx context.Context, m int, key string, val []byte) (bool, error) {
	url := "http://" + t.addrs[m] + "/v1/cp/bench/" + key
	st, hdr, body, err := httpDo(ctx, t.client, http.MethodGet, url, nil, nil)
	if err != nil {
		return false, err
	}
	if st != http.StatusOK && st != http.StatusNotFound {
		return false, fmt.Errorf("cp get: %d %s", st, body)
	}
	st, _, body, err = httpDo(ctx, t.client, http.MethodPut, url, val, map[string]string{"If-Match": hdr.Get("ETag")})
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
type etcdTarget struct {
	addrs  []string
	client *http.Client
}

func b64(s []byte) string { return base64.StdEncoding.EncodeToString(s) }

func (t *etcdTarget) post(ctx context.Context, m int, path string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	st, _, out, err := httpDo(ctx, t.client, http.MethodPost, "http://"+t.addrs[m]+path, body, map[string]string{"Content-Type": "application/json"})
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

// startEtcd starts a 3-member etcd cluster on loopback, each member its own
// process with its data dir in a temp dir and fsync on (etcd's default), and
// returns the members' client addresses once a write succeeds.
func startEtcd(b *testing.B, bin string) []string {
	b.Helper()
	addrs := freeAddrs(b, 6)
	var initial []string
	for i := range 3 {
		initial = append(initial, fmt.Sprintf("e%d=http://%s", i, addrs[2*i+1]))
	}
	var clients []string
	for i := range 3 {
		client, peer := addrs[2*i], addrs[2*i+1]
		clients = append(clients, client)
		logf, err := os.Create(fmt.Sprintf("%s/etcd-e%d.log", b.TempDir(), i))
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(bin,
			"--name", fmt.Sprintf("e%d", i),
			"--data-dir", b.TempDir(),
			"--listen-client-urls", "http://"+client,
			"--advertise-client-urls", "http://"+client,
			"--listen-peer-urls", "http://"+peer,
			"--initial-advertise-peer-urls", "http://"+peer,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", "portico-bench",
			"--log-level", "warn",
		)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			b.Fatalf("start etcd: %v", err)
		}
		b.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			_ = logf.Close()
		})
	}
	t := &etcdTarget{addrs: clients, client: benchClient()}
	poll(b, "etcd to accept writes on every member", 30*time.Second, func() bool {
		for m := range clients {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := t.put(ctx, m, "ready", []byte("1"))
			cancel()
			if err != nil {
				return false
			}
		}
		return true
	})
	return clients
}

// BenchmarkCPVsEtcd measures put and CAS (linearizable read of the
// revision, then a conditional put) throughput and latency on a 3-node
// kvnode consensus group and on a 3-member etcd 3.7 cluster, in the same
// run on the same machine, with the same clients, and reports the ratios.
//
// What each side fsyncs per write: ours, the Raft log append on the leader
// and on each follower (raftlog: one synced pebble batch per StoreLogs),
// the state being in memory; etcd, its WAL append on the leader and on each
// follower (one fsync per Raft Ready batch), its bbolt backend being
// committed in the background (every 100 ms). Neither side skips fsync.
// Our three nodes run inside the benchmark process (with the clients);
// etcd's members are three processes.
func BenchmarkCPVsEtcd(b *testing.B) {
	bin := etcdBin(b)
	gr := newGroupTuned(b, 3, func(c *cp.Config) {
		c.NoSync = false
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 0, 0, 0
		c.TrailingLogs = 0
	})
	gr.waitLeader()
	var ourAddrs []string
	for _, n := range gr.nodes {
		ourAddrs = append(ourAddrs, n.httpAddr)
	}
	ours := &cpTarget{addrs: ourAddrs, client: benchClient()}
	etcdAddrs := startEtcd(b, bin)
	etcd := &etcdTarget{addrs: etcdAddrs, client: benchClient()}
	etcdRPC, err := newEtcdGRPCTarget(etcdAddrs)
	if err != nil {
		b.Fatal(err)
	}
	defer etcdRPC.close()
	val := bytes.Repeat([]byte("v"), cpBenchValue)

	phase := func(name string, d time.Duration, op func(context.Context, *rand.Rand, int) (bool, error)) phaseStats {
		s, err := runPhase(d, op)
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		return s
	}
	b.ResetTimer()
	var oursPut, etcdPut, rpcPut, oursCAS, etcdCAS, rpcCAS phaseStats
	for b.Loop() {
		phase("ours warm-up", cpBenchWarmup, benchPut(ours, val))
		phase("etcd warm-up", cpBenchWarmup, benchPut(etcd, val))
		phase("etcd gRPC warm-up", cpBenchWarmup, benchPut(etcdRPC, val))
		var op, ep, rp, oc, ec, rc []phaseStats
		for range cpBenchRounds {
			op = append(op, phase("ours put", cpBenchPhase, benchPut(ours, val)))
			ep = append(ep, phase("etcd put", cpBenchPhase, benchPut(etcd, val)))
			rp = append(rp, phase("etcd gRPC put", cpBenchPhase, benchPut(etcdRPC, val)))
		}
		for range cpBenchRounds {
			oc = append(oc, phase("ours cas", cpBenchPhase, benchCAS(ours, val)))
			ec = append(ec, phase("etcd cas", cpBenchPhase, benchCAS(etcd, val)))
			rc = append(rc, phase("etcd gRPC cas", cpBenchPhase, benchCAS(etcdRPC, val)))
		}
		oursPut, etcdPut, rpcPut = merge(op), merge(ep), merge(rp)
		oursCAS, etcdCAS, rpcCAS = merge(oc), merge(ec), merge(rc)
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for _, m := range []struct {
		name string
		s    phaseStats
	}{{"cp_put", oursPut}, {"etcd_put", etcdPut}, {"etcd_grpc_put", rpcPut}, {"cp_cas", oursCAS}, {"etcd_cas", etcdCAS}, {"etcd_grpc_cas", rpcCAS}} {
		b.ReportMetric(m.s.opsPerSec, m.name+"/s")
		b.ReportMetric(ms(m.s.p50), m.name+"_p50_ms")
		b.ReportMetric(ms(m.s.p99), m.name+"_p99_ms")
	}
	ratio := func(a, b phaseStats) (float64, float64) {
		return a.opsPerSec / b.opsPerSec, float64(a.p99) / float64(b.p99)
	}
	putR, putP99R := ratio(oursPut, etcdPut)
	casR, casP99R := ratio(oursCAS, etcdCAS)
	rpcPutR, rpcPutP99R := ratio(oursPut, rpcPut)
	rpcCASR, rpcCASP99R := ratio(oursCAS, rpcCAS)
	b.ReportMetric(putR, "put_cp/etcd")
	b.ReportMetric(casR, "cas_cp/etcd")
	b.ReportMetric(putP99R, "put_p99_cp/etcd")
	b.ReportMetric(casP99R, "cas_p99_cp/etcd")
	b.ReportMetric(rpcPutR, "put_cp/etcd_grpc")
	b.ReportMetric(rpcCASR, "cas_cp/etcd_grpc")
	b.ReportMetric(rpcPutP99R, "put_p99_cp/etcd_grpc")
	b.ReportMetric(rpcCASP99R, "cas_p99_cp/etcd_grpc")
	b.Logf("%d clients over 3 members, %d keys, %d B values, %d alternating rounds of %s per side and workload, fsync on both sides",
		cpBenchClients, cpBenchKeys, cpBenchValue, cpBenchRounds, cpBenchPhase)
	b.Logf("%-26s %9s %9s %9s %9s", "", "ops/s", "p50", "p99", "lost CAS")
	for _, row := range []struct {
		name string
		s    phaseStats
	}{
		{"kvnode cp, put (HTTP)", oursPut}, {"etcd 3.7, put (HTTP/JSON)", etcdPut}, {"etcd 3.7, put (gRPC)", rpcPut},
		{"kvnode cp, CAS (HTTP)", oursCAS}, {"etcd 3.7, CAS (HTTP/JSON)", etcdCAS}, {"etcd 3.7, CAS (gRPC)", rpcCAS},
	} {
		b.Logf("%-26s %9.0f %9s %9s %9d", row.name, row.s.opsPerSec, row.s.p50.Round(10*time.Microsecond), row.s.p99.Round(10*time.Microsecond), row.s.conflicts)
	}
	b.Logf("vs etcd's HTTP/JSON gateway: put %.2fx throughput (p99 %.2fx), CAS %.2fx (p99 %.2fx)", putR, putP99R, casR, casP99R)
	b.Logf("vs etcd's gRPC API:          put %.2fx throughput (p99 %.2fx), CAS %.2fx (p99 %.2fx)", rpcPutR, rpcPutP99R, rpcCASR, rpcCASP99R)
}
