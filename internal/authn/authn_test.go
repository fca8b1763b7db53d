package authn_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/identity"
)

// withCert marks r as arriving over TLS with a verified client certificate
// carrying these URI SANs (identity reads only the SANs of a chain the TLS
// stack verified).
func withCert(tok string, uris ...string) *http.Request {
	r := requestWith(tok)
	c := &x509.Certificate{}
	for _, u := range uris {
		parsed, _ := url.Parse(u)
		c.URIs = append(c.URIs, parsed)
	}
	r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{c}}}
	return r
}

func TestClientCertificates(t *testing.T) {
	a, err := authn.New(authn.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Authenticate(withCert("", "spiffe://portico.local/operator/alice"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != authn.KindCert || p.ID != "spiffe://portico.local/operator/alice" || p.Name != "alice" || strings.Join(p.Roles, ",") != "admin" {
		t.Fatalf("operator: %+v", p)
	}
	// Other workloads authenticate but hold no role unless mapped.
	p, err = a.Authenticate(withCert("", "spiffe://portico.local/gateway/gw-0"))
	if err != nil || len(p.Roles) != 0 || p.Kind != authn.KindCert {
		t.Fatalf("gateway: %+v %v", p, err)
	}
	for name, r := range map[string]*http.Request{
		"other trust domain": withCert("", "spiffe://evil.example/operator/alice"),
		"no SPIFFE ID":       withCert("", "https://example.com/x"),
		"two SPIFFE IDs":     withCert("", "spiffe://portico.local/operator/a", "spiffe://portico.local/operator/b"),
		"unknown role":       withCert("", "spiffe://portico.local/hacker/x"),
	} {
		if _, err := a.Authenticate(r); !errors.Is(err, authn.ErrBadCertificate) {
			t.Errorf("%s: err = %v, want ErrBadCertificate", name, err)
		}
	}
	// A TLS connection without a verified chain is no credential.
	r := requestWith("")
	r.TLS = &tls.ConnectionState{}
	if _, err := a.Authenticate(r); !errors.Is(err, authn.ErrNoCredentials) {
		t.Fatalf("unverified TLS: %v", err)
	}
	// A bad Authorization header is refused, never rescued by the certificate.
	if _, err := a.Authenticate(withCert("not a token!", "spiffe://portico.local/operator/alice")); !errors.Is(err, authn.ErrMalformed) {
		t.Fatalf("bad bearer with cert: %v", err)
	}
}

func TestCertRoleTable(t *testing.T) {
	a, err := authn.New(authn.Config{Certs: authn.CertConfig{
		TrustDomain: "corp.example",
		Roles:       map[identity.Role][]string{identity.KVNode: {"admin"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Authenticate(withCert("", "spiffe://corp.example/kvnode/kv-1"))
	if err != nil || strings.Join(p.Roles, ",") != "admin" {
		t.Fatalf("mapped kvnode: %+v %v", p, err)
	}
	// A table replaces the default: operator is no longer mapped.
	p, err = a.Authenticate(withCert("", "spiffe://corp.example/operator/alice"))
	if err != nil || len(p.Roles) != 0 {
		t.Fatalf("unmapped operator: %+v %v", p, err)
	}
	if _, err := authn.New(authn.Config{Certs: authn.CertConfig{Roles: map[identity.Role][]string{"nope": {"admin"}}}}); !errors.Is(err, authn.ErrConfig) {
		t.Fatalf("unknown workload role: %v", err)
	}
}

// A keyspace table confines a workload role's certificates (cachenode to
// its topology keyspace); other roles stay unconfined; an empty list is a
// configuration error, never "no restriction".
func TestCertKeyspaces(t *testing.T) {
	a, err := authn.New(authn.Config{Certs: authn.CertConfig{
		Roles:     map[identity.Role][]string{identity.CacheNode: {"editor"}, identity.Operator: {"admin"}},
		Keyspaces: map[identity.Role][]string{identity.CacheNode: {"cache"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Authenticate(withCert("", "spiffe://portico.local/cachenode/cache-0"))
	if err != nil || strings.Join(p.Roles, ",") != "editor" || strings.Join(p.Keyspaces, ",") != "cache" {
		t.Fatalf("cachenode: %+v %v", p, err)
	}
	if !p.AllowsKeyspace("cache") || p.AllowsKeyspace("locks") {
		t.Fatalf("cachenode confinement: %+v", p)
	}
	p, err = a.Authenticate(withCert("", "spiffe://portico.local/operator/alice"))
	if err != nil || len(p.Keyspaces) != 0 {
		t.Fatalf("operator: %+v %v", p, err)
	}
	for _, ks := range [][]string{nil, {}, {""}} {
		if _, err := authn.New(authn.Config{Certs: authn.CertConfig{Keyspaces: map[identity.Role][]string{identity.CacheNode: ks}}}); !errors.Is(err, authn.ErrConfig) {
			t.Fatalf("keyspaces %q: %v", ks, err)
		}
	}
	if _, err := authn.New(authn.Config{Certs: authn.CertConfig{Keyspaces: map[identity.Role][]string{"nope": {"cache"}}}}); !errors.Is(err, authn.ErrConfig) {
		t.Fatalf("unknown workload role: %v", err)
	}
}

func TestContext(t *testing.T) {
	if _, ok := authn.FromContext(context.Background()); ok {
		t.Fatal("principal in an empty context")
	}
	p := authn.Principal{Kind: authn.KindToken, ID: "0123456789abcdef", Name: "ci"}
	got, ok := authn.FromContext(authn.WithPrincipal(context.Background(), p))
	if !ok || got.String() != "token:0123456789abcdef" {
		t.Fatalf("%+v %v", got, ok)
	}
	if _, ok := authn.FromContext(authn.WithPrincipal(context.Background(), authn.Principal{})); ok {
		t.Fatal("zero principal reported present")
	}
	if !(authn.Principal{}).AllowsKeyspace("any") {
		t.Fatal("no keyspaces must mean no keyspace restriction")
	}
}
