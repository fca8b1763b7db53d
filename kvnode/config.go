package kvnode

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-io/portico/internal/tlsfiles"
	"github.com/portico-io/portico/kvnode/antientropy"
	"github.com/portico-io/portico/kvnode/api"
	"github.com/portico-io/portico/kvnode/coordinator"
	"github.com/portico-io/portico/kvnode/cp"
	"github.com/portico-io/portico/kvnode/hint"
	"github.com/portico-io/portico/kvnode/membership"
	"github.com/portico-io/portico/kvnode/ring"
)

// Defaults for Config.
const (
	DefaultHTTPAddr = ":18400"
	DefaultGRPCAddr = ":18500"
	// RaftPortOffset derives the binary's default Raft address from its
	// HTTP address: 18400+i → 18600+i, the port plan of ARCHITECTURE.md.
	// (An empty Config.CP.BindAddr leaves the consensus tier off.)
	RaftPortOffset = 200
	// RaftOff as --raft-addr turns the consensus tier off.
	RaftOff             = "off"
	DefaultReplication  = 3
	DefaultGossipFanout = 3
	DefaultStartupWait  = 5 * time.Second
)

// Join modes.
const (
	// JoinAuto (the default): a node with no tokens that finds a ring
	// through its seeds joins it (tokens chosen for balance, ranges streamed
	// in); if no seed answers with a ring within StartupWait it founds one.
	JoinAuto = "auto"
	// JoinManual: a node with no tokens waits for POST /admin/v1/join.
	JoinManual = "manual"
)

// Config configures a node. Zero values take the defaults.
type Config struct {
	NodeID string
	// HTTPAddr serves the API, /metrics, /healthz, /readyz (default :18400).
	HTTPAddr string
	// GRPCAddr serves the internode protocol, gossip included (default :18500).
	GRPCAddr string
	// AdvertiseAddr is the host:port peers dial (default: GRPCAddr, with the
	// host name when its host is empty or unspecified).
	AdvertiseAddr string
	// Seeds are host:port internode addresses of other nodes.
	Seeds   []string
	DataDir string
	// Replication is N (default 3).
	Replication int
	// Vnodes is the number of tokens this node takes (default 16).
	Vnodes int
	// Rack spreads replicas when racks are configured.
	Rack string
	// JoinMode is JoinAuto or JoinManual.
	JoinMode    string
	StartupWait time.Duration

	TombstoneGrace time.Duration
	HintWindow     time.Duration
	HintInterval   time.Duration
	RepairInterval time.Duration
	RepairDepth    uint
	GossipInterval time.Duration
	GossipFanout   int
	PhiThreshold   float64
	WriteTimeout   time.Duration
	ReadTimeout    time.Duration
	// VClockKeyspaces are keyspaces (key prefix before ':') resolved with
	// vector clocks and siblings instead of LWW.
	VClockKeyspaces []string
	// CPKeyspaces are keyspaces served by the consensus tier instead of the
	// ring, under /v1/cp/{keyspace}/{key} and /v1/kv/{keyspace}:{key} alike;
	// /v1/cp/ answers 404 for any other keyspace. They need the tier
	// (CP.BindAddr), may not be vector-clock keyspaces, and are named like
	// api.ParseKeyspace requires ("leases" and "__tokens", where the API
	// tokens live, are reserved). Every node must declare the same set.
	CPKeyspaces []string
	// NoSync acknowledges writes before fsync (tests and benchmarks only).
	NoSync bool
	// CP configures the consensus tier (/v1/cp/). It is enabled when
	// CP.BindAddr is set (the binary's default is :18600); NodeID, Logger,
	// NoSync, DataDir (default DataDir/raft) and HTTPAddr (default: the
	// bound HTTP address, host name when unspecified) are filled in by the
	// node when empty.
	CP cp.Config
	// TLS names this node's certificate files (role kvnode): the internode
	// protocol and the Raft transport require peers with a kvnode
	// certificate of the trust domain and present this one. The HTTP API
	// (metrics and health included) then speaks only TLS: any TLS client is
	// served, but /admin/v1/ needs a kvnode or operator certificate, and a
	// follower forwards to the Raft leader over https with this one.
	// Without files, InsecurePlaintext must be set (debugging and tests
	// only), and every port is plaintext.
	TLS               tlsfiles.Config
	InsecurePlaintext bool
	// Auth is who may call the HTTP API: every route needs a credential
	// (an API token, an IdP JWT or a client certificate) holding its
	// permission, unless Auth.InsecureNoAuth, which nothing else implies.
	Auth AuthConfig

	Logger *slog.Logger
	// Registry receives the node's metrics (default: a new registry).
	Registry *prometheus.Registry
	// Now is the clock for TTLs, hints, grace and failure detection.
	Now func() time.Time
	// MaxClockOffset bounds how far ahead of this node's clock a peer's
	// record timestamp may be (default hlc.DefaultMaxOffset); records
	// beyond it are refused, not stored.
	MaxClockOffset time.Duration
	// OnHintPass and OnRepairPass are test signals fired after every
	// background pass.
	OnHintPass   func()
	OnRepairPass func(antientropy.Result)
}

func (c *Config) setDefaults() error {
	if c.NodeID == "" {
		h, _ := os.Hostname()
		c.NodeID = h
	}
	if c.NodeID == "" || strings.ContainsAny(c.NodeID, "\x00/") {
		return fmt.Errorf("kvnode: invalid node id %q", c.NodeID)
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.GRPCAddr == "" {
		c.GRPCAddr = DefaultGRPCAddr
	}
	if c.DataDir == "" {
		return errors.New("kvnode: DataDir is required")
	}
	if !c.TLS.IsSet() && !c.InsecurePlaintext {
		return errors.New("kvnode: no TLS certificate for the HTTP, internode and Raft ports (--tls-cert-file, --tls-key-file, --tls-ca-file), and plaintext not asked for")
	}
	if c.Replication <= 0 {
		c.Replication = DefaultReplication
	}
	if c.Vnodes <= 0 {
		c.Vnodes = ring.DefaultVnodes
	}
	switch c.JoinMode {
	case "":
		c.JoinMode = JoinAuto
	case JoinAuto, JoinManual:
	default:
		return fmt.Errorf("kvnode: join mode %q (auto or manual)", c.JoinMode)
	}
	if c.StartupWait <= 0 {
		c.StartupWait = DefaultStartupWait
	}
	if c.TombstoneGrace <= 0 {
		c.TombstoneGrace = antientropy.DefaultGrace
	}
	if c.HintWindow <= 0 {
		c.HintWindow = hint.DefaultWindow
	}
	if c.RepairInterval <= 0 {
		c.RepairInterval = antientropy.DefaultInterval
	}
	if c.HintWindow >= c.TombstoneGrace {
		// A hint replayed after its key's tombstone was purged would bring
		// the deleted value back.
		return fmt.Errorf("kvnode: hint window %s must be shorter than the tombstone grace %s", c.HintWindow, c.TombstoneGrace)
	}
	if c.RepairInterval >= c.TombstoneGrace {
		return fmt.Errorf("kvnode: repair interval %s must be shorter than the tombstone grace %s", c.RepairInterval, c.TombstoneGrace)
	}
	if err := c.checkCPKeyspaces(); err != nil {
		return err
	}
	if c.GossipInterval <= 0 {
		c.GossipInterval = membership.DefaultInterval
	}
	if c.GossipFanout <= 0 {
		c.GossipFanout = DefaultGossipFanout
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = coordinator.DefaultTimeout
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = coordinator.DefaultTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// checkCPKeyspaces validates CPKeyspaces: a keyspace has one home (the
// ring or the Raft group), so it cannot also be a vector-clock keyspace.
func (c *Config) checkCPKeyspaces() error {
	if len(c.CPKeyspaces) > 0 && c.CP.BindAddr == "" {
		return fmt.Errorf("kvnode: CP keyspaces %q (--cp-keyspaces) need the consensus tier, which is off (--raft-addr)", c.CPKeyspaces)
	}
	for _, ks := range c.CPKeyspaces {
		if _, err := api.ParseKeyspace(ks); err != nil {
			var br *api.BadRequest
			if errors.As(err, &br) {
				err = errors.New(br.Message)
			}
			return fmt.Errorf("kvnode: CP keyspace %q (--cp-keyspaces): %w", ks, err)
		}
		if slices.Contains(c.VClockKeyspaces, ks) {
			return fmt.Errorf("kvnode: keyspace %q is declared both vector-clock (--vclock-keyspaces) and CP (--cp-keyspaces): it is served by the ring or by the Raft group, not both", ks)
		}
	}
	return nil
}

// advertise derives the address peers dial from the bound listener.
func advertise(configured string, bound net.Addr) string {
	if configured != "" {
		return configured
	}
	host, port, err := net.SplitHostPort(bound.String())
	if err != nil {
		return bound.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil && h != "" {
			host = h
		} else {
			host = "127.0.0.1"
		}
	}
	return net.JoinHostPort(host, port)
}

// RaftBindAddr resolves the --raft-addr flag: "" derives host:port+200 from
// the HTTP address (so nodes started side by side on 18400+i get 18600+i),
// RaftOff returns "" (tier off), anything else is used as given.
func RaftBindAddr(flag, httpAddr string) (string, error) {
	switch flag {
	case RaftOff:
		return "", nil
	case "":
	default:
		return flag, nil
	}
	if httpAddr == "" {
		httpAddr = DefaultHTTPAddr
	}
	host, port, err := net.SplitHostPort(httpAddr)
	if err != nil {
		return "", fmt.Errorf("kvnode: deriving the raft address from %q: %w", httpAddr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p+RaftPortOffset > 65535 {
		return "", fmt.Errorf("kvnode: deriving the raft address from %q: port %q (set --raft-addr)", httpAddr, port)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+RaftPortOffset)), nil
}
