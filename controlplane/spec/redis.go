package spec

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// RedisProxyPrefix starts the names of the Envoy listener and cluster a
// redis proxy compiles to ("redis_<name>").
const RedisProxyPrefix = "redis_"

// Read policies accepted for RedisProxy.ReadPolicy: which node of a shard
// serves read commands.
const (
	ReadMaster        = "master"
	ReadPreferMaster  = "preferMaster"
	ReadReplica       = "replica"
	ReadPreferReplica = "preferReplica"
	ReadAny           = "any"
)

// ReadPolicies lists the accepted read policies.
var ReadPolicies = []string{ReadMaster, ReadPreferMaster, ReadReplica, ReadPreferReplica, ReadAny}

// Bounds of a redis proxy's durations. Envoy works in milliseconds, so a
// shorter duration would become 0 (a refresh timer firing in a loop).
const (
	minRedisDuration = time.Millisecond
	maxRedisDuration = time.Hour
	maxRedisPrefix   = 256
	maxRedisSeeds    = 64
	maxRedisRoutes   = 256
)

// RedisListen is where a redis proxy accepts RESP connections.
type RedisListen struct {
	// Address is the IP to bind (default 0.0.0.0).
	Address string `json:"address,omitempty"`
	Port    uint32 `json:"port"`
}

// RedisSeed is one address of the Redis Cluster Envoy asks for the slot map
// (CLUSTER SLOTS); the other nodes are discovered from the answer.
type RedisSeed struct {
	Address string `json:"address"`
	Port    uint32 `json:"port"`
}

// RedisCluster is the Redis Cluster (cachenode cluster) behind a proxy and
// how Envoy keeps its slot map current. Zero durations and a nil threshold
// mean Envoy's defaults (refresh every 5s, timeout 3s, redirect refresh
// interval 5s, threshold 5).
type RedisCluster struct {
	Seeds                 []RedisSeed `json:"seeds"`
	ClusterRefreshRate    Duration    `json:"clusterRefreshRate,omitempty"`
	ClusterRefreshTimeout Duration    `json:"clusterRefreshTimeout,omitempty"`
	// RedirectRefreshInterval is the least time between two slot map
	// refreshes triggered by MOVED/ASK redirections.
	RedirectRefreshInterval Duration `json:"redirectRefreshInterval,omitempty"`
	// RedirectRefreshThreshold is how many redirections within the interval
	// trigger a refresh (0 disables redirection-triggered refreshes).
	RedirectRefreshThreshold *uint32 `json:"redirectRefreshThreshold,omitempty"`
	// ConnectTimeout bounds connecting to a node (default 1s).
	ConnectTimeout Duration `json:"connectTimeout,omitempty"`
	// PlatformTLS makes Envoy reach the nodes over TLS with the gateways'
	// workload certificate, accepting only servers whose SPIFFE ID has the
	// role cachenode: the way to a Portico cache cluster whose RESP ports
	// speak TLS. The control plane must know the gateway identity
	// (--gateway-tls-*-file).
	PlatformTLS bool `json:"platformTLS,omitempty"`
}

// RedisPrefixRoute sends the commands whose key starts with Prefix to the
// cluster of another redis proxy (RedisProxy, default this proxy's own),
// optionally removing the prefix from the key.
type RedisPrefixRoute struct {
	Prefix       string `json:"prefix"`
	RemovePrefix bool   `json:"removePrefix,omitempty"`
	RedisProxy   string `json:"redisProxy,omitempty"`
}

// RedisAuth is a password clients must send with AUTH before other
// commands. Like secrets of type tls with files, the password is a file on
// the gateway host: nothing sensitive is stored by the control plane.
type RedisAuth struct {
	File string `json:"file"`
}

// RedisProxy is an Envoy redis_proxy listener in front of a Redis Cluster
// (the cachenode cluster): Envoy discovers the slot map from the seeds,
// hashes keys (with hashtags) to slots, follows MOVED/ASK redirections and
// splits multi-key commands, so clients speak plain single-node Redis.
type RedisProxy struct {
	Name    string       `json:"name"`
	Listen  RedisListen  `json:"listen"`
	Cluster RedisCluster `json:"cluster"`
	// OpTimeout bounds every command (default 1s).
	OpTimeout Duration `json:"opTimeout,omitempty"`
	// ReadPolicy is one of ReadPolicies (default master).
	ReadPolicy string `json:"readPolicy,omitempty"`
	// MaxUpstreamUnknownConnections caps connections Envoy opens to nodes
	// named by redirections but not yet in its slot map (default 100).
	MaxUpstreamUnknownConnections *uint32 `json:"maxUpstreamUnknownConnections,omitempty"`
	// DownstreamAuthPassword, when set, makes clients AUTH first.
	DownstreamAuthPassword *RedisAuth `json:"downstreamAuthPassword,omitempty"`
	// PrefixRoutes route keys by prefix; everything else goes to this
	// proxy's cluster.
	PrefixRoutes []RedisPrefixRoute `json:"prefixRoutes,omitempty"`
}

var _ Resource = (*RedisProxy)(nil)

func (p *RedisProxy) ResourceName() string { return p.Name }

// EnvoyName is the name of the Envoy listener and cluster p compiles to.
func (p *RedisProxy) EnvoyName() string { return RedisProxyPrefix + p.Name }

func checkRedisDuration(field string, d Duration) error {
	if d == 0 {
		return nil
	}
	if d.D() < minRedisDuration || d.D() > maxRedisDuration {
		return fieldErr(field, CodeInvalid, "must be between 1ms and 1h")
	}
	if d.D()%time.Millisecond != 0 {
		return fieldErr(field, CodeInvalid, "must be a whole number of milliseconds")
	}
	return nil
}

// Validate checks a redis proxy on its own.
func (p *RedisProxy) Validate() error {
	if err := checkName(p.Name); err != nil {
		return err
	}
	if p.Listen.Address != "" {
		if _, err := netip.ParseAddr(p.Listen.Address); err != nil {
			return fieldErr("listen.address", CodeInvalid, "must be an IP address")
		}
	}
	if p.Listen.Port == 0 || p.Listen.Port > 65535 {
		return fieldErr("listen.port", CodeInvalid, "must be 1-65535")
	}
	c := p.Cluster
	if len(c.Seeds) == 0 {
		return fieldErr("cluster.seeds", CodeRequired, "at least one seed node is required")
	}
	if len(c.Seeds) > maxRedisSeeds {
		return fieldErr("cluster.seeds", CodeInvalid, "at most %d seed nodes", maxRedisSeeds)
	}
	seen := map[string]bool{}
	for i, s := range c.Seeds {
		f := fmt.Sprintf("cluster.seeds[%d]", i)
		if s.Address == "" {
			return fieldErr(f+".address", CodeRequired, "is required")
		}
		if _, err := netip.ParseAddr(s.Address); err != nil && !validHostname(s.Address) {
			return fieldErr(f+".address", CodeInvalid, "must be an IP address or a hostname")
		}
		if s.Port == 0 || s.Port > 65535 {
			return fieldErr(f+".port", CodeInvalid, "must be 1-65535")
		}
		key := net.JoinHostPort(s.Address, fmt.Sprint(s.Port))
		if seen[key] {
			return fieldErr(f, CodeConflict, "duplicate seed %s", key)
		}
		seen[key] = true
	}
	for _, d := range []struct {
		field string
		d     Duration
	}{
		{"cluster.clusterRefreshRate", c.ClusterRefreshRate},
		{"cluster.clusterRefreshTimeout", c.ClusterRefreshTimeout},
		{"cluster.redirectRefreshInterval", c.RedirectRefreshInterval},
		{"cluster.connectTimeout", c.ConnectTimeout},
		{"opTimeout", p.OpTimeout},
	} {
		if err := checkRedisDuration(d.field, d.d); err != nil {
			return err
		}
	}
	if p.ReadPolicy != "" && !slices.Contains(ReadPolicies, p.ReadPolicy) {
		return fieldErr("readPolicy", CodeInvalid, "must be one of %s", strings.Join(ReadPolicies, ", "))
	}
	if a := p.DownstreamAuthPassword; a != nil {
		if err := checkPath("downstreamAuthPassword.file", a.File); err != nil {
			return err
		}
	}
	if len(p.PrefixRoutes) > maxRedisRoutes {
		return fieldErr("prefixRoutes", CodeInvalid, "at most %d routes", maxRedisRoutes)
	}
	prefixes := map[string]int{}
	for i, r := range p.PrefixRoutes {
		f := fmt.Sprintf("prefixRoutes[%d]", i)
		if r.Prefix == "" {
			return fieldErr(f+".prefix", CodeRequired, "is required (the catch-all route is the proxy's own cluster)")
		}
		if len(r.Prefix) > maxRedisPrefix {
			return fieldErr(f+".prefix", CodeInvalid, "must be at most %d bytes", maxRedisPrefix)
		}
		if j, dup := prefixes[r.Prefix]; dup {
			return fieldErr(f+".prefix", CodeConflict, "same prefix as prefixRoutes[%d]", j)
		}
		prefixes[r.Prefix] = i
		if r.RedisProxy != "" && checkName(r.RedisProxy) != nil {
			return fieldErr(f+".redisProxy", CodeInvalid, "must be a redis proxy name")
		}
	}
	return nil
}

// validateRedisProxies checks what spans resources: prefix routes name
// existing redis proxies, listen ports collide with no other listener, and
// the compiled names (redis_<name>) collide with no listener or cluster.
func (c *Config) validateRedisProxies() error {
	proxies := KindRedisProxy.Info()
	ports := map[uint32]string{}
	for _, n := range SortedKeys(c.Listeners) {
		ports[c.Listeners[n].Port] = "listener " + n
	}
	for _, n := range SortedKeys(c.RedisProxies) {
		p := c.RedisProxies[n]
		f := "redis-proxies/" + n
		if other, dup := ports[p.Listen.Port]; dup {
			return fieldErr(f+": listen.port", CodeConflict, "port %d is used by %s", p.Listen.Port, other)
		}
		ports[p.Listen.Port] = "redis proxy " + n
		if _, ok := c.Clusters[p.EnvoyName()]; ok {
			return fieldErr(f+": name", CodeConflict, "compiles to Envoy cluster %q, the name of an existing cluster", p.EnvoyName())
		}
		if _, ok := c.Listeners[p.EnvoyName()]; ok {
			return fieldErr(f+": name", CodeConflict, "compiles to Envoy listener %q, the name of an existing listener", p.EnvoyName())
		}
		if err := c.refError(proxies, n, p); err != nil {
			return err
		}
	}
	return nil
}

// refs are a redis proxy's references: the proxies its prefix routes
// send to.
func (p *RedisProxy) refs() []Ref {
	var out []Ref
	for i, r := range p.PrefixRoutes {
		if r.RedisProxy != "" {
			out = append(out, Ref{Field: fmt.Sprintf("prefixRoutes[%d].redisProxy", i), Kind: KindRedisProxy, Name: r.RedisProxy})
		}
	}
	return out
}
