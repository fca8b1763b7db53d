// Package idp holds the rules for identity-provider settings that both the
// control plane's validation and extauthz's policy load apply, so a
// provider the admin API refuses is refused by extauthz too, whichever way
// it arrives (an older control plane, a persisted policy, a bug).
//
// Endpoint URLs (a JWKS, an RFC 7662 introspection endpoint) are absolute
// https URLs with a host and no userinfo. Plain http is accepted only when
// the provider opts in (allowInsecureLoopback) and the host is a loopback
// literal — an IP in 127.0.0.0/8, ::1, or the name localhost — the
// development setups where the IdP runs on the same machine. Keys and
// introspection answers decide who gets in: fetched in clear over a
// network, anyone on the path could substitute their own.
package idp

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
)

var (
	// ErrInvalid: not an absolute http(s) URL with a host, or it carries
	// userinfo or a fragment.
	ErrInvalid = errors.New("idp: invalid URL")
	// ErrInsecure: plain http where https is required.
	ErrInsecure = errors.New("idp: plain http")
)

// Introspection rate limits: a provider's token bucket (per extauthz
// replica) refills at most MaxRequestsPerSecond and holds at most MaxBurst.
// Unset, it refills DefaultRequestsPerSecond and holds one second's worth:
// enough for the first sight of each new token of a busy client population
// (answers are cached), far below what a flood of random bearer strings
// would otherwise push onto the IdP.
const (
	DefaultRequestsPerSecond = 50
	MaxRequestsPerSecond     = 10_000
	MaxBurst                 = 10_000
)

// CheckURL reports whether raw may be used as an identity-provider
// endpoint; allowInsecureLoopback is the provider's opt-in to plain http on
// loopback. The error's text is meant for the operator and never echoes
// the URL (it could carry userinfo).
func CheckURL(raw string, allowInsecureLoopback bool) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Host == "" || u.Opaque != "" || strings.ContainsAny(raw, " \t\r\n"):
		return fmt.Errorf("%w: must be an absolute https URL", ErrInvalid)
	case u.User != nil:
		return fmt.Errorf("%w: must not carry credentials (userinfo)", ErrInvalid)
	case strings.Contains(raw, "#"):
		return fmt.Errorf("%w: must not have a fragment", ErrInvalid)
	case u.Scheme == "https":
		return nil
	case u.Scheme != "http":
		return fmt.Errorf("%w: must be an https URL", ErrInvalid)
	case !IsLoopback(u.Hostname()):
		return fmt.Errorf("%w: must be https (plain http only to a loopback host, with allowInsecureLoopback)", ErrInsecure)
	case !allowInsecureLoopback:
		return fmt.Errorf("%w: must be https; plain http to a loopback host needs allowInsecureLoopback: true", ErrInsecure)
	}
	return nil
}

// IsLoopback reports whether host (without port or brackets) is
// "localhost" or a loopback IP literal. Short or numeric forms inet_aton
// would take ("127.1", "2130706433") are not: what is checked must be what
// every resolver reads the same way.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Zone() != "" {
		return false
	}
	return ip.Unmap().IsLoopback()
}

// ValidClientID reports whether id may be sent as an OAuth client id: 1-256
// characters without control characters (it is form-encoded on the wire,
// so any other character is fine).
func ValidClientID(id string) bool {
	if id == "" || len(id) > 256 {
		return false
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}
