package compile

import (
	"slices"
	"sort"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-io/portico/controlplane/spec"
	authv1 "github.com/portico-io/portico/proto/portico/auth/v1"
	ratelimitv1 "github.com/portico-io/portico/proto/portico/ratelimit/v1"
)

func (c *compiler) jwtProviders() []Resource {
	out := []Resource{}
	for _, name := range spec.SortedKeys(c.cfg.JWTProviders) {
		p := c.cfg.JWTProviders[name]
		m := &authv1.JwtProvider{
			Name:                  p.Name,
			Issuer:                p.Issuer,
			Audiences:             slices.Clone(p.Audiences),
			AllowAnyAudience:      p.AllowAnyAudience,
			JwksUri:               p.JWKSURI,
			InlineJwks:            p.InlineJWKS,
			Algorithms:            slices.Clone(p.Algorithms),
			ClockSkew:             dur(p.ClockSkew.D()),
			JwksCacheTtl:          dur(p.JWKSCacheTTL.D()),
			IntrospectionUri:      p.IntrospectionURI,
			IntrospectionClientId: p.IntrospectionClientID,
			AllowInsecureLoopback: p.AllowInsecureLoopback,
		}
		// Only the secret's name: its value stays in extauthz's secrets
		// directory and never enters a snapshot.
		if ref := p.IntrospectionClientSecretRef; ref != nil {
			m.IntrospectionClientSecretRef = ref.Name
		}
		if rl := p.IntrospectionRateLimit; rl != nil {
			m.IntrospectionRequestsPerSecond, m.IntrospectionBurst = rl.RequestsPerSecond, rl.Burst
		}
		out = append(out, m)
	}
	return out
}

// revocations is the single list of revoked jtis, sorted. Expired entries
// are kept: dropping them would make the output depend on the wall clock;
// the store removes them, and extauthz ignores them past expiry.
func (c *compiler) revocations() *authv1.RevocationList {
	l := &authv1.RevocationList{Name: RevocationsName}
	for _, jti := range c.cfg.Revocations.Names() {
		r := c.cfg.Revocations.Lookup(jti)
		l.Revocations = append(l.Revocations, &authv1.Revocation{
			Jti:       r.Name,
			ExpiresAt: timestamppb.New(r.ExpiresAt),
		})
	}
	return l
}

var (
	algorithms = map[string]ratelimitv1.Algorithm{
		"":                          ratelimitv1.Algorithm_TOKEN_BUCKET,
		spec.AlgorithmTokenBucket:   ratelimitv1.Algorithm_TOKEN_BUCKET,
		spec.AlgorithmSlidingWindow: ratelimitv1.Algorithm_SLIDING_WINDOW,
		spec.AlgorithmFixedWindow:   ratelimitv1.Algorithm_FIXED_WINDOW,
	}
	modes = map[string]ratelimitv1.Mode{
		"":               ratelimitv1.Mode_ENFORCE,
		spec.ModeEnforce: ratelimitv1.Mode_ENFORCE,
		spec.ModeShadow:  ratelimitv1.Mode_SHADOW,
	}
	failModes = map[string]ratelimitv1.FailMode{
		"":              ratelimitv1.FailMode_OPEN,
		spec.FailOpen:   ratelimitv1.FailMode_OPEN,
		spec.FailClosed: ratelimitv1.FailMode_CLOSED,
	}
)

func (c *compiler) rateLimitRules() []Resource {
	out := []Resource{}
	for _, name := range spec.SortedKeys(c.cfg.RateLimitRules) {
		r := c.cfg.RateLimitRules[name]
		rule := &ratelimitv1.RateLimitRule{
			Name:       r.Name,
			Domain:     r.Domain,
			Limit:      r.Limit,
			Window:     durationpb.New(r.Window.D()),
			Burst:      r.Burst,
			Algorithm:  algorithms[r.Algorithm],
			Mode:       modes[r.Mode],
			FailMode:   failModes[r.FailMode],
			HighVolume: r.HighVolume,
			Tenant:     r.Tenant,
			Priority:   r.Priority,
		}
		for _, d := range r.Descriptors {
			rule.Descriptors = append(rule.Descriptors, &ratelimitv1.Descriptor{Key: d.Key, Value: d.Value})
		}
		out = append(out, rule)
	}
	return out
}

var rlsUnits = map[time.Duration]rlsconfv3.RateLimitUnit{
	time.Second:    rlsconfv3.RateLimitUnit_SECOND,
	time.Minute:    rlsconfv3.RateLimitUnit_MINUTE,
	time.Hour:      rlsconfv3.RateLimitUnit_HOUR,
	24 * time.Hour: rlsconfv3.RateLimitUnit_DAY,
}

// rateLimitConfigs compiles the standard envoyproxy/ratelimit config, one
// per domain, descriptors nested along each rule's entries. That format has
// no windows other than 1s/1m/1h/1d, no burst and no tenant overrides, so
// rules using those are left out here; they live in Portico's own
// RateLimitRule resources, which ratelimitsvc reads. When two rules land on
// the same descriptor path the higher priority (then smaller name) wins.
func (c *compiler) rateLimitConfigs() []Resource {
	byDomain := map[string][]*spec.RateLimitRule{}
	for _, name := range spec.SortedKeys(c.cfg.RateLimitRules) {
		r := c.cfg.RateLimitRules[name]
		byDomain[r.Domain] = append(byDomain[r.Domain], r)
	}
	out := []Resource{}
	for _, domain := range spec.SortedKeys(byDomain) {
		rules := byDomain[domain]
		sort.SliceStable(rules, func(i, j int) bool { return rules[i].Priority > rules[j].Priority })
		root := &rlsconfv3.RateLimitDescriptor{}
		for _, r := range rules {
			unit, ok := rlsUnits[r.Window.D()]
			if !ok || r.Tenant != "" {
				continue
			}
			node := root
			for _, d := range r.Descriptors {
				node = child(node, d.Key, d.Value)
			}
			if node.RateLimit != nil {
				continue
			}
			node.RateLimit = &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: r.Limit, Name: r.Name}
			node.ShadowMode = r.Mode == spec.ModeShadow
		}
		sortDescriptors(root.Descriptors)
		out = append(out, &rlsconfv3.RateLimitConfig{Name: domain, Domain: domain, Descriptors: root.Descriptors})
	}
	return out
}

func child(n *rlsconfv3.RateLimitDescriptor, key, value string) *rlsconfv3.RateLimitDescriptor {
	for _, d := range n.Descriptors {
		if d.Key == key && d.Value == value {
			return d
		}
	}
	d := &rlsconfv3.RateLimitDescriptor{Key: key, Value: value}
	n.Descriptors = append(n.Descriptors, d)
	return d
}

func sortDescriptors(ds []*rlsconfv3.RateLimitDescriptor) {
	sort.Slice(ds, func(i, j int) bool {
		if ds[i].Key != ds[j].Key {
			return ds[i].Key < ds[j].Key
		}
		return ds[i].Value < ds[j].Value
	})
	for _, d := range ds {
		sortDescriptors(d.Descriptors)
	}
}
