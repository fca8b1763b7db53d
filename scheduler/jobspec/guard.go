package jobspec

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// ErrForbiddenTarget is wrapped when a target address is not allowed.
var ErrForbiddenTarget = errors.New("jobspec: target not allowed")

// Resolver looks up a host's addresses (net.DefaultResolver fits).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Guard decides which HTTP targets the scheduler may call (SSRF defence).
// With an empty allowlist only public unicast addresses are allowed; with
// entries, only what an entry names: "host" or "host:port" (matched by
// name) or a CIDR / IP (matched against every resolved address). A host
// allowed by name is resolved too, and every address it resolves to must
// be one a name may stand for (nameAddrAllowed: never link-local, such as
// the cloud metadata address, nor loopback unless the name is localhost),
// so a name whose DNS answer changes cannot lead inside the host. Dials
// go to the checked addresses, never to a second resolution. Guard is
// immutable and safe for concurrent use.
type Guard struct {
	hosts     map[string]bool // "host" or "host:port", lower case
	prefixes  []netip.Prefix
	ipPorts   map[netip.AddrPort]bool
	resolver  Resolver
	lookupTTL time.Duration
}

// NewGuard parses a comma-separated allowlist. resolver nil means
// net.DefaultResolver.
func NewGuard(allowlist string, resolver Resolver) (*Guard, error) {
	g := &Guard{hosts: map[string]bool{}, ipPorts: map[netip.AddrPort]bool{}, resolver: resolver, lookupTTL: 5 * time.Second}
	if g.resolver == nil {
		g.resolver = net.DefaultResolver
	}
	for e := range strings.SplitSeq(allowlist, ",") {
		e = strings.ToLower(strings.TrimSpace(e))
		if e == "" {
			continue
		}
		if p, err := netip.ParsePrefix(e); err == nil {
			g.prefixes = append(g.prefixes, p.Masked())
			continue
		}
		if a, err := netip.ParseAddr(e); err == nil {
			g.prefixes = append(g.prefixes, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		if ap, err := netip.ParseAddrPort(e); err == nil {
			g.ipPorts[ap] = true
			continue
		}
		if strings.ContainsAny(e, "/ ") {
			return nil, fmt.Errorf("jobspec: allowlist entry %q is not host, host:port or CIDR", e)
		}
		g.hosts[e] = true
	}
	return g, nil
}

func (g *Guard) empty() bool { return len(g.hosts) == 0 && len(g.prefixes) == 0 && len(g.ipPorts) == 0 }

// CheckURL resolves the URL's host (within ctx and the lookup timeout)
// and checks every address.
func (g *Guard) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	ctx, cancel := context.WithTimeout(ctx, g.lookupTTL)
	defer cancel()
	_, err = g.Addrs(ctx, u.Hostname(), port)
	return err
}

// Addrs returns the addresses of host that may be dialled on port, or an
// error wrapping ErrForbiddenTarget when the host is not allowed or any
// of its addresses is not.
func (g *Guard) Addrs(ctx context.Context, host, port string) ([]netip.Addr, error) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	byName := g.hosts[host] || g.hosts[net.JoinHostPort(host, port)]
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		addrs = []netip.Addr{a}
	} else {
		if addrs, err = g.resolver.LookupNetIP(ctx, "ip", host); err != nil {
			return nil, fmt.Errorf("%w: cannot resolve %q: %v", ErrForbiddenTarget, host, err)
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: %q has no addresses", ErrForbiddenTarget, host)
	}
	p, _ := netip.ParseAddrPort("0.0.0.0:" + port)
	for i, a := range addrs {
		a = a.Unmap()
		addrs[i] = a
		if byName {
			if !nameAddrAllowed(host, a) {
				return nil, fmt.Errorf("%w: %s is allowed by name but resolves to %s (loopback, link-local, multicast or an IPv4-embedding address); allow that address by CIDR if it is really meant", ErrForbiddenTarget, host, a)
			}
			continue
		}
		if !g.addrAllowed(netip.AddrPortFrom(a, p.Port())) {
			return nil, fmt.Errorf("%w: %s resolves to %s, which the allowlist does not permit", ErrForbiddenTarget, host, a)
		}
	}
	return addrs, nil
}

// nameAddrAllowed reports whether a host allowed by name may be dialled at
// a. Private addresses are fine (an in-cluster Service name resolves to
// one); addresses a remote name has no business resolving to are not.
func nameAddrAllowed(host string, a netip.Addr) bool {
	switch {
	case a.IsUnspecified() || a.IsMulticast() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast():
		return false
	case a.IsLoopback():
		return host == "localhost" || strings.HasSuffix(host, ".localhost")
	}
	return !inAny(a, ipv4Embedding)
}

func (g *Guard) addrAllowed(ap netip.AddrPort) bool {
	if g.empty() {
		return isPublic(ap.Addr())
	}
	if g.ipPorts[ap] {
		return true
	}
	for _, p := range g.prefixes {
		if p.Contains(ap.Addr()) {
			return true
		}
	}
	return false
}

func prefixes(list ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(list))
	for i, s := range list {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func inAny(a netip.Addr, list []netip.Prefix) bool {
	for _, p := range list {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ipv4Embedding are IPv6 ranges whose addresses carry or reach an IPv4
// address (a gateway or the host's own stack may translate them to it):
// IPv4-compatible (::a.b.c.d), NAT64 well-known and local-use, Teredo and
// 6to4. 2002:a9fe:a9fe:: is 169.254.169.254 by another name.
var ipv4Embedding = prefixes("::/96", "64:ff9b::/96", "64:ff9b:1::/48", "2001::/32", "2002::/16")

// nonPublic are special-purpose ranges Go's netip predicates do not
// cover (RFC 6890 and its IPv6 registry): CGNAT, documentation,
// benchmarking, reserved, ORCHIDv2, discard-only, ULA, plus ipv4Embedding.
var nonPublic = append(prefixes("0.0.0.0/8", "100.64.0.0/10", "192.0.0.0/24", "192.0.2.0/24", "198.18.0.0/15",
	"198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4", "100::/64", "2001:2::/48", "2001:20::/28", "2001:db8::/32",
	"fc00::/7"), ipv4Embedding...)

// isPublic reports whether a is a globally routable unicast address (no
// loopback, private, link-local such as 169.254.169.254, CGNAT,
// documentation, reserved or IPv4-embedding ranges).
func isPublic(a netip.Addr) bool {
	if !a.IsGlobalUnicast() || a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() {
		return false
	}
	return !inAny(a, nonPublic)
}

// DialContext dials addr ("host:port") only at addresses the guard allows,
// checking the addresses it actually connects to so DNS answers that
// change after validation (rebinding) cannot reach a forbidden address.
func (g *Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	addrs, err := g.Addrs(ctx, host, port)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	var last error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}
