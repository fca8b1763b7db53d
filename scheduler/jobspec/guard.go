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
// name, no resolution) or a CIDR / IP (matched against every resolved
// address). Guard is immutable and safe for concurrent use.
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

// CheckURL resolves the URL's host and checks every address.
func (g *Guard) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.lookupTTL)
	defer cancel()
	_, err = g.Addrs(ctx, u.Hostname(), port)
	return err
}

// Addrs returns the addresses of host that may be dialled on port, or an
// error wrapping ErrForbiddenTarget when the host is not allowed or any
// of its addresses is not. Hosts allowed by name return nil addresses:
// dial them by name.
func (g *Guard) Addrs(ctx context.Context, host, port string) ([]netip.Addr, error) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if g.hosts[host] || g.hosts[net.JoinHostPort(host, port)] {
		return nil, nil
	}
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
	for _, a := range addrs {
		a = a.Unmap()
		if !g.addrAllowed(netip.AddrPortFrom(a, p.Port())) {
			return nil, fmt.Errorf("%w: %s resolves to %s, which the allowlist does not permit", ErrForbiddenTarget, host, a)
		}
	}
	return addrs, nil
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

var nonPublic = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{"0.0.0.0/8", "100.64.0.0/10", "192.0.0.0/24", "192.0.2.0/24", "198.18.0.0/15",
		"198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4", "64:ff9b::/96", "2001:db8::/32", "fc00::/7"} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// isPublic reports whether a is a globally routable unicast address (no
// loopback, private, link-local such as 169.254.169.254, CGNAT,
// documentation or reserved ranges).
func isPublic(a netip.Addr) bool {
	if !a.IsGlobalUnicast() || a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
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
	if addrs == nil {
		return d.DialContext(ctx, network, addr)
	}
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
