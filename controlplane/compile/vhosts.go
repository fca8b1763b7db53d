package compile

import (
	"fmt"
	"maps"
	"reflect"
	"slices"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/portico-io/portico/controlplane/spec"
)

// Reusing virtual hosts.
//
// The route configuration is one resource holding every virtual host, so
// before this a one-route change rebuilt, validated and encoded all of
// them: at 10,000 routes, most of a compile. A Compiler keeps each virtual
// host it built with the routes it was built from (routeState); the next
// compile rebuilds only the virtual hosts whose member routes changed (a
// route changed, added or removed, or a covering wildcard or catch-all
// route changing, which changes every virtual host it is merged into).
//
// A compiled route depends on more than its spec.Route: the body-buffer
// switch (needsBuffer), the rate-limit rules (its fail-closed stage) and
// its clusters' overload settings. When any of those differ from the
// previous compile's, every virtual host is rebuilt.
//
// The route configuration's encoding is assembled from its virtual hosts'
// encodings: a deterministic proto encoding of a message is its fields in
// number order, a sub-message encoded exactly as it is on its own, so the
// bytes equal a marshal of the whole message (checked against one in
// tests), and so does its hash, the delta xDS version.

// routeState is the route configuration a compile built.
type routeState struct {
	buffer bool
	vhosts map[string]*builtVHost // by domain
}

// builtVHost is one checked virtual host: the routes it was built from, in
// match order, its message and its deterministic encoding. Immutable.
type builtVHost struct {
	members []vhRoute
	msg     *routev3.VirtualHost
	wire    []byte
}

// routeConfigurationReusing compiles the route configuration, reusing the
// virtual hosts of sc.prev whose inputs are unchanged, records what it
// built in sc.next, and returns the configuration checked and encoded.
func (c *compiler) routeConfigurationReusing(sc *reuseCache) (*routev3.RouteConfiguration, checked, error) {
	buffer := c.needsBuffer()
	var prev map[string]*builtVHost
	if sc != nil && sc.prev != nil && sc.prev.routes != nil && sc.prev.routes.buffer == buffer &&
		sameRouteInputs(sc.prev.cfg, c.cfg) {
		prev = sc.prev.routes.vhosts
	}
	rc := &routev3.RouteConfiguration{Name: RouteConfigName}
	if err := rc.ValidateAll(); err != nil { // the configuration's own fields; virtual hosts below
		return nil, checked{}, fmt.Errorf("%w: %s %q: %w", ErrInvalidOutput, RouteType, rc.Name, err)
	}
	vhs := c.virtualHosts()
	next := &routeState{buffer: buffer, vhosts: make(map[string]*builtVHost, len(vhs))}
	rc.VirtualHosts = make([]*routev3.VirtualHost, 0, len(vhs))
	size := protowire.SizeTag(1) + protowire.SizeBytes(len(rc.Name))
	rebuilt := 0
	for _, v := range vhs {
		b := prev[v.domain]
		if b == nil || !slices.Equal(b.members, v.routes) {
			var err error
			if b, err = c.buildVHost(v, buffer); err != nil {
				return nil, checked{}, err
			}
			rebuilt++
		}
		next.vhosts[v.domain] = b
		rc.VirtualHosts = append(rc.VirtualHosts, b.msg)
		size += protowire.SizeTag(2) + protowire.SizeBytes(len(b.wire))
	}
	wire := make([]byte, 0, size)
	wire = protowire.AppendTag(wire, 1, protowire.BytesType)
	wire = protowire.AppendString(wire, rc.Name)
	for _, vh := range rc.VirtualHosts {
		wire = protowire.AppendTag(wire, 2, protowire.BytesType)
		wire = protowire.AppendBytes(wire, next.vhosts[vh.Name].wire)
	}
	if sc != nil {
		sc.next.routes, sc.vhostsRebuilt = next, rebuilt
	}
	return rc, checked{hash: cache.HashResource(wire), wire: wire}, nil
}

// buildVHost compiles, validates and encodes the virtual host of v.
func (c *compiler) buildVHost(v virtualHost, buffer bool) (*builtVHost, error) {
	// Named after its only domain: unique, and no hostname can be "*".
	vh := &routev3.VirtualHost{Name: v.domain, Domains: []string{v.domain}}
	perFilter, err := vhostPerFilterConfig(v.routes)
	if err != nil {
		return nil, err
	}
	vh.TypedPerFilterConfig = perFilter
	for _, m := range v.routes {
		rs, err := c.routes(m.r, buffer)
		if err != nil {
			return nil, err
		}
		vh.Routes = append(vh.Routes, rs...)
	}
	if err := vh.ValidateAll(); err != nil {
		return nil, fmt.Errorf("%w: %s %q: virtual host %q: %w", ErrInvalidOutput, RouteType, RouteConfigName, v.domain, err)
	}
	b, err := cache.MarshalResource(vh)
	if err != nil {
		return nil, fmt.Errorf("%w: marshal virtual host %q: %w", ErrInvalidOutput, v.domain, err)
	}
	return &builtVHost{members: v.routes, msg: vh, wire: b}, nil
}

// sameRouteInputs reports whether everything a compiled route reads
// besides its spec.Route and the compile options is the same in a and b:
// the rate-limit rules and each cluster's overload settings. Values are
// immutable, so an unchanged rule is the same pointer.
func sameRouteInputs(a, b *spec.Config) bool {
	if !maps.Equal(a.RateLimitRules, b.RateLimitRules) {
		return false
	}
	overload := func(m map[string]*spec.Cluster, name string) *spec.Overload {
		if cl := m[name]; cl != nil {
			return cl.Overload
		}
		return nil
	}
	for _, pair := range [][2]map[string]*spec.Cluster{{a.Clusters, b.Clusters}, {b.Clusters, a.Clusters}} {
		for name, cl := range pair[0] {
			if cl != pair[1][name] && !reflect.DeepEqual(cl.Overload, overload(pair[1], name)) {
				return false
			}
		}
	}
	return true
}
