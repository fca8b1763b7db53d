// Command cachenode runs one Portico cache node: RESP on :7000, metrics and
// health on HTTP :18700.
//
// It needs its certificate files (--tls-cert-file, --tls-key-file,
// --tls-ca-file, role cachenode): RESP then speaks TLS only (client
// certificates optional; AUTH as before) and the cluster bus mutual TLS.
// Without them it refuses to start unless --insecure-plaintext is given.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"github.com/portico-io/portico/cachenode"
	"github.com/portico-io/portico/cachenode/namespace"
	"github.com/portico-io/portico/cachenode/server"
	"github.com/portico-io/portico/internal/envflag"
	"github.com/portico-io/portico/internal/logging"
	"github.com/portico-io/portico/internal/tlsfiles"
)

func main() {
	fs := flag.NewFlagSet("cachenode", flag.ExitOnError)
	nodeID := envflag.String(fs, "node-id", "PORTICO_NODE_ID", "", "node id (default cachenode-<host>-<pid>)")
	respAddr := envflag.String(fs, "resp-addr", "PORTICO_CACHE_RESP_ADDR", cachenode.DefaultRESPAddr, "RESP listen address (TLS only with the --tls-* files; client certificates optional)")
	httpAddr := envflag.String(fs, "http-addr", "PORTICO_CACHE_HTTP_ADDR", cachenode.DefaultHTTPAddr, "HTTP /metrics, /healthz, /readyz listen address")
	nsFile := envflag.String(fs, "namespaces-file", "PORTICO_CACHE_NAMESPACES_FILE", "", "YAML namespaces file, hot-reloaded (empty = only the default namespace)")
	clusterConfig := envflag.String(fs, "cluster-config", "PORTICO_CACHE_CLUSTER_CONFIG", "", "cluster mode: YAML/JSON static slot map (nodes, slot ranges, epoch), hot-reloaded")
	kvAddrs := envflag.String(fs, "cluster-kv-addrs", "PORTICO_CACHE_CLUSTER_KV_ADDRS", "", "cluster mode from a topology store: comma-separated kvnode HTTP addresses (host:port) whose consensus tier holds the slot map (needs --cluster-name; excludes --cluster-config)")
	clusterName := envflag.String(fs, "cluster-name", "PORTICO_CACHE_CLUSTER_NAME", "", "cluster name: the slot map is the key <name>/topology of --cluster-kv-keyspace")
	kvKeyspace := envflag.String(fs, "cluster-kv-keyspace", "PORTICO_CACHE_CLUSTER_KV_KEYSPACE", "cache", "kvnode CP keyspace holding topologies (declared with kvnode --cp-keyspaces)")
	topoCheck := envflag.Duration(fs, "cluster-topology-check", "PORTICO_CACHE_CLUSTER_TOPOLOGY_CHECK", 0, "cluster mode from a topology store: period of the read confirming the store (default 5s; failover needs it shorter than the write lease)")
	fo := envflag.Bool(fs, "failover", "PORTICO_CACHE_FAILOVER", true, "cluster mode from a topology store: automatic failover (quorum failure reports, replica promotion, write lease)")
	foInterval := envflag.Duration(fs, "failover-interval", "PORTICO_CACHE_FAILOVER_INTERVAL", 0, "probe, report and lease-renewal period (default 500ms)")
	foAfter := envflag.Duration(fs, "fail-after", "PORTICO_CACHE_FAIL_AFTER", 0, "a primary is failed over once a quorum of primaries has found it unreachable this long (default 3s)")
	foLease := envflag.Duration(fs, "failover-lease", "PORTICO_CACHE_FAILOVER_LEASE", 0, "a primary refuses writes when the store has not confirmed its role for this long (default 2s; below --fail-after)")
	handover := envflag.Bool(fs, "handover-on-shutdown", "PORTICO_CACHE_HANDOVER_ON_SHUTDOWN", true, "topology-store mode: on SIGTERM a primary hands its slots to a caught-up replica before exiting")
	busAddr := envflag.String(fs, "bus-addr", "PORTICO_CACHE_BUS_ADDR", "", "cluster mode: node-to-node listen address for slot imports and replication (default :<the map's bus port for this node>, RESP port + 10000)")
	clusterSecret := envflag.String(fs, "cluster-secret", "PORTICO_CACHE_CLUSTER_SECRET", "", "cluster mode: shared secret required on the bus port and presented to peers")
	migrateRate := envflag.Uint(fs, "migrate-keys-per-second", "PORTICO_CACHE_MIGRATE_KEYS_PER_SECOND", 20000, "cluster mode: rate at which this node copies out slots it migrates")
	maxmem := envflag.String(fs, "maxmemory", "PORTICO_CACHE_MAXMEMORY", "0", "node memory limit: bytes or 256mb-style; 0 = unlimited")
	loops := envflag.String(fs, "event-loops", "PORTICO_CACHE_EVENT_LOOPS", "auto", "event loops serving plaintext RESP connections: auto (one per two of GOMAXPROCS, at least one), a number, or off (a goroutine per connection); TLS connections always have a goroutine each")
	requireAuth := envflag.Bool(fs, "require-auth", "PORTICO_CACHE_REQUIRE_AUTH", false, "refuse commands before AUTH <namespace> <secret>")
	logFormat := envflag.String(fs, "log-format", "PORTICO_LOG_FORMAT", "json", "log format: json or text")
	logLevel := envflag.String(fs, "log-level", "PORTICO_LOG_LEVEL", "info", "log level")
	tlsFlags := tlsfiles.RegisterFlags(fs)
	plaintext := envflag.Bool(fs, "insecure-plaintext", "PORTICO_INSECURE_PLAINTEXT", false, "run without the --tls-* files: RESP (AUTH secrets, values) in clear and, in cluster mode, a cluster bus anyone who reaches it can SYNC the whole dataset from (debugging and benchmarks only)")
	_ = fs.Parse(os.Args[1:])

	log, err := logging.New(os.Stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	mm, err := namespace.ParseBytes(*maxmem)
	if err != nil {
		fmt.Fprintf(os.Stderr, "--maxmemory: %v\n", err)
		os.Exit(2)
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		// Memory, not CPU, bounds a cache node: collect at 1.5x the live heap
		// rather than 2x (measured: ~340 instead of ~430 RSS bytes per
		// 100-byte key). GOGC overrides.
		debug.SetGCPercent(50)
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		if lim := memoryLimit(mm, cgroupMemoryMax()); lim > 0 {
			debug.SetMemoryLimit(lim)
			log.Info("Go memory limit set", "bytes", lim)
		}
	}
	// GOMAXPROCS is Go's default, not set here: the CPUs of the process's
	// affinity mask, capped by its cgroup CPU quota (and followed when the
	// quota changes). The RESP server's event loops are sized from it
	// (server.DefaultLoops); see the README's "Sizing".
	eventLoops, err := parseLoops(*loops)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log.Info("runtime sizing", "gomaxprocs", runtime.GOMAXPROCS(0), "numCPU", runtime.NumCPU(), "eventLoops", shownLoops(eventLoops))
	cfg := cachenode.Config{NodeID: *nodeID, RESPAddr: *respAddr, HTTPAddr: *httpAddr, NamespacesFile: *nsFile, ClusterConfig: *clusterConfig,
		ClusterKVAddrs: splitList(*kvAddrs), ClusterName: *clusterName, ClusterKVKeyspace: *kvKeyspace,
		ClusterTopologyCheck: *topoCheck, Failover: *fo, HandoverOnShutdown: *handover, FailoverInterval: *foInterval, FailAfter: *foAfter, FailoverLease: *foLease, BusAddr: *busAddr, ClusterSecret: *clusterSecret, TLS: tlsFlags.Config(), InsecurePlaintext: *plaintext, MigrateKeysPerSecond: float64(*migrateRate),
		MaxMemory: mm, RequireAuth: *requireAuth, EventLoops: eventLoops, Logger: log}
	if (len(cfg.ClusterKVAddrs) > 0) != (cfg.ClusterName != "") {
		fmt.Fprintln(os.Stderr, "--cluster-kv-addrs and --cluster-name go together")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cachenode.Run(ctx, cfg); err != nil {
		log.Error("cachenode: exiting", "err", err)
		os.Exit(1)
	}
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// memoryLimit is the Go soft memory limit: 1.5 x maxmemory + 64 MB, so the
// GC works harder as the heap nears maxmemory instead of letting it reach
// 2x, and never above 90 % of the container's memory limit, so the GC runs
// before the kernel's OOM killer would. 0 = leave the default.
func memoryLimit(maxmemory, cgroupMax int64) int64 {
	var lim int64
	if maxmemory > 0 {
		lim = maxmemory + maxmemory/2 + 64<<20
	}
	if cgroupMax > 0 {
		if c := cgroupMax / 10 * 9; lim == 0 || c < lim {
			lim = c
		}
	}
	return lim
}

// cgroupMemoryMax reads the cgroup v2 memory limit (0 when there is none).
func cgroupMemoryMax() int64 {
	b, err := os.ReadFile("/sys/fs/cgroup/memory.max")
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil { // "max"
		return 0
	}
	return n
}

// parseLoops reads --event-loops as cachenode.Config.EventLoops: auto is
// 0 (server.DefaultLoops), off is -1 (a goroutine per connection).
func parseLoops(v string) (int, error) {
	switch v {
	case "auto", "":
		return 0, nil
	case "off":
		return -1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1024 {
		return 0, fmt.Errorf("--event-loops %q: want auto, off or a number from 1 to 1024", v)
	}
	return n, nil
}

// shownLoops is the number of event loops the server will run for n.
func shownLoops(n int) int {
	switch {
	case n == 0:
		return server.DefaultLoops()
	case n < 0:
		return 0
	}
	return n
}
