// Package identity is Portico's workload identity: a SPIFFE ID of the form
// spiffe://<trust-domain>/<role>/<name> carried as the only URI SAN of an
// X.509 certificate from the platform CA (or the user's own PKI), and the
// checks a service makes on the verified identity of its peer.
//
// An identity is only ever read from a certificate chain the TLS stack has
// verified (VerifiedChains); nothing a peer says about itself in a request
// (node ids, user agents, headers) stands in for it.
package identity

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// DefaultTrustDomain is the trust domain when none is configured.
const DefaultTrustDomain = "portico.local"

// Role is what a workload is; it decides what the workload may do and
// receive.
type Role string

// The roles of ARCHITECTURE.md, "Trust and identity".
const (
	Gateway      Role = "gateway"
	ExtAuthz     Role = "extauthz"
	RateLimit    Role = "ratelimit"
	ControlPlane Role = "controlplane"
	Scheduler    Role = "scheduler"
	Worker       Role = "worker"
	KVNode       Role = "kvnode"
	CacheNode    Role = "cachenode"
	Operator     Role = "operator"
)

// Roles lists every role. Read-only.
var Roles = []Role{Gateway, ExtAuthz, RateLimit, ControlPlane, Scheduler, Worker, KVNode, CacheNode, Operator}

// Valid reports whether r is one of Roles.
func (r Role) Valid() bool { return slices.Contains(Roles, r) }

// ID is a verified workload identity.
type ID struct {
	TrustDomain string
	Role        Role
	Name        string
}

// New returns the ID for a role and name in a trust domain.
func New(trustDomain string, role Role, name string) (ID, error) {
	if !role.Valid() {
		return ID{}, fmt.Errorf("%w: unknown role %q (want one of %s)", ErrBadID, role, roleList())
	}
	td, err := spiffeid.TrustDomainFromString(trustDomain)
	if err != nil {
		return ID{}, fmt.Errorf("%w: trust domain %q: %v", ErrBadID, trustDomain, err)
	}
	if _, err := spiffeid.FromSegments(td, string(role), name); err != nil {
		return ID{}, fmt.Errorf("%w: name %q: %v", ErrBadID, name, err)
	}
	return ID{TrustDomain: td.Name(), Role: role, Name: name}, nil
}

// Parse parses spiffe://<trust-domain>/<role>/<name>.
func Parse(s string) (ID, error) {
	sid, err := spiffeid.FromString(s)
	if err != nil {
		return ID{}, fmt.Errorf("%w: %q: %v", ErrBadID, s, err)
	}
	parts := strings.Split(strings.TrimPrefix(sid.Path(), "/"), "/")
	if len(parts) != 2 {
		return ID{}, fmt.Errorf("%w: %q: want spiffe://<trust-domain>/<role>/<name>", ErrBadID, s)
	}
	return New(sid.TrustDomain().Name(), Role(parts[0]), parts[1])
}

// String returns the SPIFFE ID.
func (id ID) String() string {
	return "spiffe://" + id.TrustDomain + "/" + string(id.Role) + "/" + id.Name
}

// URI returns the SPIFFE ID as a URI SAN.
func (id ID) URI() *url.URL {
	return &url.URL{Scheme: "spiffe", Host: id.TrustDomain, Path: "/" + string(id.Role) + "/" + id.Name}
}

// IsZero reports whether id is the zero ID.
func (id ID) IsZero() bool { return id == ID{} }

// FromCert returns the identity of a certificate: its one spiffe:// URI SAN.
// The caller must have verified the certificate.
func FromCert(c *x509.Certificate) (ID, error) {
	var found []*url.URL
	for _, u := range c.URIs {
		if u.Scheme == "spiffe" {
			found = append(found, u)
		}
	}
	if len(found) != 1 {
		return ID{}, fmt.Errorf("%w: certificate %q has %d spiffe:// URI SANs, want 1", ErrNoIdentity, c.Subject.CommonName, len(found))
	}
	return Parse(found[0].String())
}

// FromConnState returns the identity of a TLS peer whose chain was verified.
func FromConnState(cs *tls.ConnectionState) (ID, error) {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return ID{}, fmt.Errorf("%w: no verified peer certificate", ErrNoIdentity)
	}
	return FromCert(cs.VerifiedChains[0][0])
}

// FromContext returns the identity of a gRPC call's peer.
func FromContext(ctx context.Context) (ID, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ID{}, fmt.Errorf("%w: no peer", ErrNoIdentity)
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return ID{}, fmt.Errorf("%w: not a TLS connection", ErrNoIdentity)
	}
	return FromConnState(&info.State)
}

// FromRequest returns the identity of an HTTP request's TLS peer.
func FromRequest(r *http.Request) (ID, error) { return FromConnState(r.TLS) }

// Policy says which identities may call: a trust domain and a set of roles
// (none = any role of the trust domain).
type Policy struct {
	TrustDomain string
	Roles       []Role
}

// Allow returns nil when id may call.
func (p Policy) Allow(id ID) error {
	td := p.TrustDomain
	if td == "" {
		td = DefaultTrustDomain
	}
	if id.TrustDomain != td {
		return fmt.Errorf("%w: %s is not of trust domain %s", ErrForbidden, id, td)
	}
	if len(p.Roles) > 0 && !slices.Contains(p.Roles, id.Role) {
		return fmt.Errorf("%w: %s: role %s may not call here (allowed: %s)", ErrForbidden, id, id.Role, joinRoles(p.Roles))
	}
	return nil
}

// Errors.
var (
	// ErrBadID is a malformed SPIFFE ID or an unknown role.
	ErrBadID = errors.New("identity: bad SPIFFE ID")
	// ErrNoIdentity is a peer without a verified certificate carrying one ID.
	ErrNoIdentity = errors.New("identity: no verified identity")
	// ErrForbidden is an identity the policy does not allow.
	ErrForbidden = errors.New("identity: forbidden")
)

func roleList() string { return joinRoles(Roles) }

func joinRoles(rs []Role) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, ", ")
}
