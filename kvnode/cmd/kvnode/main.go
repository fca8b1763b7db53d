// Command kvnode runs one node of Portico's Dynamo-style key-value store:
// the API on :18400, the internode protocol (replication, gossip, repair)
// on :18500, and the consensus tier's Raft transport on :18600.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/internal/envflag"
	"github.com/portico-io/portico/internal/logging"
	"github.com/portico-io/portico/internal/tlsfiles"
	"github.com/portico-io/portico/kvnode"
	"github.com/portico-io/portico/kvnode/antientropy"
	"github.com/portico-io/portico/kvnode/coordinator"
	"github.com/portico-io/portico/kvnode/cp"
	"github.com/portico-io/portico/kvnode/hint"
	"github.com/portico-io/portico/kvnode/hlc"
	"github.com/portico-io/portico/kvnode/membership"
)

func main() {
	fs := flag.NewFlagSet("kvnode", flag.ExitOnError)
	nodeID := envflag.String(fs, "node-id", "PORTICO_NODE_ID", "", "node id, stable across restarts (default: host name)")
	httpAddr := envflag.String(fs, "http-addr", "PORTICO_KV_HTTP_ADDR", kvnode.DefaultHTTPAddr, "HTTP API, metrics and health listen address")
	grpcAddr := envflag.String(fs, "grpc-addr", "PORTICO_KV_GRPC_ADDR", kvnode.DefaultGRPCAddr, "internode gRPC listen address (replication, gossip, repair)")
	advertiseAddr := envflag.String(fs, "advertise-addr", "PORTICO_KV_ADVERTISE_ADDR", "", "host:port peers dial for internode gRPC (default: grpc-addr, host name when unspecified)")
	seeds := envflag.String(fs, "seeds", "PORTICO_KV_SEEDS", "", "comma-separated host:port internode addresses of other nodes")
	dataDir := envflag.String(fs, "data-dir", "PORTICO_KV_DATA_DIR", "", "pebble data directory (required)")
	replication := envflag.Uint(fs, "replication", "PORTICO_KV_REPLICATION", kvnode.DefaultReplication, "replication factor N")
	vnodes := envflag.Uint(fs, "vnodes", "PORTICO_KV_VNODES", 16, "tokens this node takes on the ring")
	rack := envflag.String(fs, "rack", "PORTICO_KV_RACK", "", "rack or zone; replicas spread over racks when set")
	joinMode := envflag.String(fs, "join-mode", "PORTICO_KV_JOIN_MODE", kvnode.JoinAuto, "auto: join the seeds' ring or found one; manual: wait for POST /admin/v1/join")
	startupWait := envflag.Duration(fs, "startup-wait", "PORTICO_KV_STARTUP_WAIT", kvnode.DefaultStartupWait, "how long a new node waits to hear its seeds before founding a ring")
	grace := envflag.Duration(fs, "tombstone-grace", "PORTICO_KV_TOMBSTONE_GRACE", antientropy.DefaultGrace, "how long tombstones are kept; a full repair must run more often")
	hintWindow := envflag.Duration(fs, "hint-window", "PORTICO_KV_HINT_WINDOW", hint.DefaultWindow, "how long hints are kept for a down replica")
	repairInterval := envflag.Duration(fs, "repair-interval", "PORTICO_KV_REPAIR_INTERVAL", antientropy.DefaultInterval, "time between anti-entropy passes")
	gossipInterval := envflag.Duration(fs, "gossip-interval", "PORTICO_KV_GOSSIP_INTERVAL", membership.DefaultInterval, "gossip and heartbeat period")
	maxOffset := envflag.Duration(fs, "max-clock-offset", "PORTICO_KV_MAX_CLOCK_OFFSET", hlc.DefaultMaxOffset, "how far ahead of this node's clock a peer's record timestamp may be; records beyond it are refused")
	writeTimeout := envflag.Duration(fs, "write-timeout", "PORTICO_KV_WRITE_TIMEOUT", coordinator.DefaultTimeout, "how long a write waits for its quorum")
	readTimeout := envflag.Duration(fs, "read-timeout", "PORTICO_KV_READ_TIMEOUT", coordinator.DefaultTimeout, "how long a read waits for its quorum")
	vclock := envflag.String(fs, "vclock-keyspaces", "PORTICO_KV_VCLOCK_KEYSPACES", "", "comma-separated keyspaces (key prefix before ':') kept with vector clocks and siblings instead of LWW")
	cpKeyspaces := envflag.String(fs, "cp-keyspaces", "PORTICO_KV_CP_KEYSPACES", "", "comma-separated keyspaces served by the Raft group (linearizable, compare-and-set) instead of the ring, under /v1/cp/{keyspace}/{key} and /v1/kv/{keyspace}:{key}; the same on every node")
	raftAddr := envflag.String(fs, "raft-addr", "PORTICO_KV_RAFT_ADDR", "", "consensus tier (/v1/cp/) Raft transport listen address (default: the http-addr port + 200, so :18400 → :18600); off disables the tier")
	raftAdvertise := envflag.String(fs, "raft-advertise-addr", "PORTICO_KV_RAFT_ADVERTISE_ADDR", "", "host:port peers dial for Raft (default: raft-addr, host name when unspecified)")
	raftBootstrap := envflag.Bool(fs, "raft-bootstrap", "PORTICO_KV_RAFT_BOOTSTRAP", false, "found the Raft group with --raft-peers as voters if this node has no Raft state (safe on every node given the same peers)")
	raftPeers := envflag.String(fs, "raft-peers", "PORTICO_KV_RAFT_PEERS", "", "initial voters for --raft-bootstrap: comma-separated id=host:raftport, this node included (default: this node alone)")
	logFormat := envflag.String(fs, "log-format", "PORTICO_LOG_FORMAT", "json", "log format: json or text")
	logLevel := envflag.String(fs, "log-level", "PORTICO_LOG_LEVEL", "info", "log level")
	tlsFlags := tlsfiles.RegisterFlags(fs)
	plaintext := envflag.Bool(fs, "insecure-plaintext", "PORTICO_INSECURE_PLAINTEXT", false, "HTTP API, internode gRPC and Raft without TLS: any process that reaches them can join the ring and read replication traffic, and tokens cross the network in clear (debugging only; the HTTP API still needs credentials unless --insecure-no-auth)")
	noAuth := envflag.Bool(fs, "insecure-no-auth", "PORTICO_KV_INSECURE_NO_AUTH", false, "serve the HTTP API to anyone as an admin, without credentials or Host check (debugging and tests only; not implied by --insecure-plaintext)")
	cacheKeyspaces := envflag.String(fs, "cachenode-keyspaces", "PORTICO_KV_CACHENODE_KEYSPACES", strings.Join(kvnode.DefaultCacheNodeKeyspaces, ","), "comma-separated keyspaces a cachenode certificate may read and write (its topology keyspaces); empty: cachenodes get no access")
	authFlags := authn.RegisterFlags(fs)
	_ = fs.Parse(os.Args[1:])

	log, err := logging.New(os.Stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	raftBind, err := kvnode.RaftBindAddr(*raftAddr, *httpAddr)
	if err != nil {
		log.Error("kvnode: --raft-addr", "err", err)
		os.Exit(2)
	}
	peers, err := cp.ParsePeers(*raftPeers)
	if err != nil {
		log.Error("kvnode: --raft-peers", "err", err)
		os.Exit(2)
	}
	jwt, err := authFlags.JWT(func(r string) error { return authz.CheckRoles([]string{r}) })
	if err != nil {
		log.Error("kvnode: operator JWTs", "err", err)
		os.Exit(2)
	}
	cacheKS := split(*cacheKeyspaces)
	if cacheKS == nil {
		cacheKS = []string{}
	}
	cfg := kvnode.Config{
		NodeID: *nodeID, HTTPAddr: *httpAddr, GRPCAddr: *grpcAddr, AdvertiseAddr: *advertiseAddr,
		Seeds: split(*seeds), DataDir: *dataDir, Replication: int(*replication), Vnodes: int(*vnodes), Rack: *rack,
		JoinMode: *joinMode, StartupWait: *startupWait, TombstoneGrace: *grace, HintWindow: *hintWindow,
		RepairInterval: *repairInterval, GossipInterval: *gossipInterval, WriteTimeout: *writeTimeout, MaxClockOffset: *maxOffset,
		ReadTimeout: *readTimeout, VClockKeyspaces: split(*vclock), CPKeyspaces: split(*cpKeyspaces), Logger: log,
		CP:  cp.Config{BindAddr: raftBind, AdvertiseAddr: *raftAdvertise, Bootstrap: *raftBootstrap, Peers: peers},
		TLS: tlsFlags.Config(), InsecurePlaintext: *plaintext,
		Auth: kvnode.AuthConfig{AdminTokenFile: *authFlags.TokenFile, JWT: jwt, Hosts: authFlags.HostList(),
			CacheNodeKeyspaces: cacheKS, InsecureNoAuth: *noAuth},
	}
	if *noAuth {
		log.Warn("kvnode: --insecure-no-auth: the HTTP API serves ANYONE as an admin (every keyspace, membership, repair, decommission) with no credential and no Host check; use only for debugging and tests")
	} else if *authFlags.TokenFile == "" && jwt == nil && !cfg.TLS.IsSet() {
		log.Warn("kvnode: no --admin-token-file, --oidc-issuer or certificates: no caller can authenticate to the HTTP API")
	}
	if *plaintext {
		log.Warn("kvnode: the HTTP API, internode gRPC and Raft are PLAINTEXT: any process that reaches them can join the ring and read its data, and bearer tokens cross the network in clear; use only for debugging")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := kvnode.Run(ctx, cfg); err != nil {
		log.Error("kvnode: exiting", "err", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
