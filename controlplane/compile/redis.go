package compile

import (
	"cmp"
	"fmt"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	redisclusterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/redis/v3"
	redisproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/redis_proxy/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/portico-io/portico/controlplane/spec"
)

// Names of the Envoy extensions a redis proxy compiles to.
const (
	RedisProxyFilter      = "envoy.filters.network.redis_proxy"
	RedisClusterType      = "envoy.clusters.redis"
	DefaultRedisOpTimeout = time.Second
)

var readPolicies = map[string]redisproxyv3.RedisProxy_ConnPoolSettings_ReadPolicy{
	"":                     redisproxyv3.RedisProxy_ConnPoolSettings_MASTER,
	spec.ReadMaster:        redisproxyv3.RedisProxy_ConnPoolSettings_MASTER,
	spec.ReadPreferMaster:  redisproxyv3.RedisProxy_ConnPoolSettings_PREFER_MASTER,
	spec.ReadReplica:       redisproxyv3.RedisProxy_ConnPoolSettings_REPLICA,
	spec.ReadPreferReplica: redisproxyv3.RedisProxy_ConnPoolSettings_PREFER_REPLICA,
	spec.ReadAny:           redisproxyv3.RedisProxy_ConnPoolSettings_ANY,
}

// redisListeners compiles every redis proxy to a listener redis_<name>
// whose only filter is redis_proxy, routing to the proxy's cluster.
func (c *compiler) redisListeners() ([]Resource, error) {
	var out []Resource
	for _, name := range spec.SortedKeys(c.cfg.RedisProxies) {
		l, err := c.redisListener(c.cfg.RedisProxies[name])
		if err != nil {
			return nil, fmt.Errorf("redis-proxies/%s: %w", name, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// redisClusters compiles every redis proxy to a cluster redis_<name> of
// type envoy.clusters.redis seeded with the proxy's nodes.
func (c *compiler) redisClusters() ([]Resource, error) {
	var out []Resource
	for _, name := range spec.SortedKeys(c.cfg.RedisProxies) {
		cl, err := c.redisCluster(c.cfg.RedisProxies[name])
		if err != nil {
			return nil, fmt.Errorf("redis-proxies/%s: %w", name, err)
		}
		out = append(out, cl)
	}
	return out, nil
}

func (c *compiler) redisListener(p *spec.RedisProxy) (*listenerv3.Listener, error) {
	policy, ok := readPolicies[p.ReadPolicy]
	if !ok {
		return nil, fmt.Errorf("%w: readPolicy %q", ErrInvalidConfig, p.ReadPolicy)
	}
	settings := &redisproxyv3.RedisProxy_ConnPoolSettings{
		OpTimeout: durationpb.New(cmp.Or(p.OpTimeout.D(), DefaultRedisOpTimeout)),
		// Keys with the same {hashtag} go to one slot, as a cluster-aware
		// client would send them; MOVED/ASK are followed by Envoy itself.
		EnableHashtagging: true,
		EnableRedirection: true,
		ReadPolicy:        policy,
	}
	if n := p.MaxUpstreamUnknownConnections; n != nil {
		settings.MaxUpstreamUnknownConnections = wrapperspb.UInt32(*n)
	}
	routes := &redisproxyv3.RedisProxy_PrefixRoutes{
		CatchAllRoute: &redisproxyv3.RedisProxy_PrefixRoutes_Route{Cluster: p.EnvoyName()},
	}
	for _, r := range p.PrefixRoutes {
		target := p.EnvoyName()
		if r.RedisProxy != "" {
			other, ok := c.cfg.RedisProxies[r.RedisProxy]
			if !ok {
				return nil, fmt.Errorf("%w: redis proxy %q does not exist", ErrInvalidConfig, r.RedisProxy)
			}
			target = other.EnvoyName()
		}
		routes.Routes = append(routes.Routes, &redisproxyv3.RedisProxy_PrefixRoutes_Route{
			Prefix:       r.Prefix,
			RemovePrefix: r.RemovePrefix,
			Cluster:      target,
		})
	}
	rp := &redisproxyv3.RedisProxy{
		StatPrefix:   p.EnvoyName(),
		Settings:     settings,
		PrefixRoutes: routes,
	}
	if a := p.DownstreamAuthPassword; a != nil {
		rp.DownstreamAuthPasswords = []*corev3.DataSource{fileSource(a.File)}
	}
	if err := rp.ValidateAll(); err != nil {
		return nil, fmt.Errorf("%w: redis_proxy filter: %w", ErrInvalidOutput, err)
	}
	cfg, err := anyOf(rp)
	if err != nil {
		return nil, err
	}
	addr := cmp.Or(p.Listen.Address, DefaultListenerAddress)
	return &listenerv3.Listener{
		Name:    p.EnvoyName(),
		Address: socketAddress(addr, p.Listen.Port),
		FilterChains: []*listenerv3.FilterChain{{
			Filters: []*listenerv3.Filter{{
				Name:       RedisProxyFilter,
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: cfg},
			}},
		}},
	}, nil
}

// redisCluster is the Redis Cluster behind a proxy. Envoy's redis cluster
// resolves each seed (an IP resolves to itself, a hostname through DNS),
// asks one of them CLUSTER SLOTS and from then on tracks the slot map from
// the nodes it learnt; the seeds are only the way in. lb_policy must be
// CLUSTER_PROVIDED for the slot-aware load balancer (any other policy gets
// a plain one that ignores slots).
func (c *compiler) redisCluster(p *spec.RedisProxy) (*clusterv3.Cluster, error) {
	rc := p.Cluster
	cfg := &redisclusterv3.RedisClusterConfig{
		ClusterRefreshRate:      dur(rc.ClusterRefreshRate.D()),
		ClusterRefreshTimeout:   dur(rc.ClusterRefreshTimeout.D()),
		RedirectRefreshInterval: dur(rc.RedirectRefreshInterval.D()),
	}
	if t := rc.RedirectRefreshThreshold; t != nil {
		cfg.RedirectRefreshThreshold = wrapperspb.UInt32(*t)
	}
	if err := cfg.ValidateAll(); err != nil {
		return nil, fmt.Errorf("%w: redis cluster config: %w", ErrInvalidOutput, err)
	}
	typed, err := anyOf(cfg)
	if err != nil {
		return nil, err
	}
	seeds := append([]spec.RedisSeed(nil), rc.Seeds...)
	sortFunc(seeds, func(a, b spec.RedisSeed) bool {
		if a.Address != b.Address {
			return a.Address < b.Address
		}
		return a.Port < b.Port
	})
	lle := &endpointv3.LocalityLbEndpoints{}
	for _, s := range seeds {
		lle.LbEndpoints = append(lle.LbEndpoints, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: socketAddress(s.Address, s.Port),
			}},
		})
	}
	var ts *corev3.TransportSocket
	if rc.PlatformTLS {
		g := c.opts.GatewayIdentity
		if g == nil {
			return nil, fmt.Errorf("%w: redis proxy %q: cluster.platformTLS needs the gateway identity (controlplane --gateway-tls-cert-file, --gateway-tls-key-file, --gateway-tls-ca-file)", ErrInvalidConfig, p.Name)
		}
		if ts, err = g.transportSocket("cachenode"); err != nil { // RESP: no ALPN
			return nil, err
		}
	}
	return &clusterv3.Cluster{
		Name:            p.EnvoyName(),
		TransportSocket: ts,
		ClusterDiscoveryType: &clusterv3.Cluster_ClusterType{ClusterType: &clusterv3.Cluster_CustomClusterType{
			Name:        RedisClusterType,
			TypedConfig: typed,
		}},
		ConnectTimeout: durationpb.New(cmp.Or(rc.ConnectTimeout.D(), DefaultConnectTimeout)),
		LbPolicy:       clusterv3.Cluster_CLUSTER_PROVIDED,
		// Seeds given by name resolve to IPv4 first (cachenode pods and
		// loopback runs), falling back to IPv6.
		DnsLookupFamily: clusterv3.Cluster_V4_PREFERRED,
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: p.EnvoyName(),
			Endpoints:   []*endpointv3.LocalityLbEndpoints{lle},
		},
	}, nil
}
