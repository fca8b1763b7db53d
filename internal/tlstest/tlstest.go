// Package tlstest makes a throwaway platform PKI for tests: a CA in a
// temporary directory, workload certificate files for any role, and the
// clients every mTLS surface must refuse (no certificate, another CA, an
// expired certificate, a wrong role) beside the one it must serve.
package tlstest

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/pki"
	"github.com/portico-io/portico/internal/tlsfiles"
)

// PKI is a CA and the directory its files live in.
type PKI struct {
	Dir string
	CA  *pki.CA
}

// New creates a CA for identity.DefaultTrustDomain in t.TempDir().
func New(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.NewCA(identity.DefaultTrustDomain, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Write(dir); err != nil {
		t.Fatal(err)
	}
	return &PKI{Dir: dir, CA: ca}
}

// CAFile is the bundle workloads trust.
func (p *PKI) CAFile() string { return filepath.Join(p.Dir, pki.CACertFile) }

// Files writes <name>.crt and <name>.key for role (valid for a day, with
// SANs localhost and 127.0.0.1) and returns the config that loads them.
func (p *PKI) Files(t testing.TB, role identity.Role, name string) tlsfiles.Config {
	t.Helper()
	cfg := tlsfiles.Config{
		CertFile: filepath.Join(p.Dir, name+".crt"),
		KeyFile:  filepath.Join(p.Dir, name+".key"),
		CAFile:   p.CAFile(),
	}
	p.Reissue(t, cfg, role, name)
	return cfg
}

// Reissue rewrites cfg's certificate and key with a fresh pair, as a
// rotation does.
func (p *PKI) Reissue(t testing.TB, cfg tlsfiles.Config, role identity.Role, name string) {
	t.Helper()
	certPEM, keyPEM := p.issue(t, role, name, time.Now(), 0)
	if err := pki.WritePair(cfg.CertFile, cfg.KeyFile, certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
}

// Load writes role's files and loads them.
func (p *PKI) Load(t testing.TB, role identity.Role, name string) *tlsfiles.Files {
	t.Helper()
	f, err := tlsfiles.Load(p.Files(t, role, name))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (p *PKI) issue(t testing.TB, role identity.Role, name string, now time.Time, validity time.Duration) (certPEM, keyPEM []byte) {
	t.Helper()
	certPEM, keyPEM, err := p.CA.Issue(pki.Request{
		Role: role, Name: name, Validity: validity,
		DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM
}

// Case is a client a surface must refuse (Allowed false) or serve.
type Case struct {
	Name    string
	Client  *tls.Config
	Allowed bool
}

// Cases returns the clients of the refusal table for a surface that serves
// role allowed and not role wrong: no client certificate, a certificate
// from another CA, an expired certificate of the allowed role, a valid
// certificate of the wrong role, and a valid certificate of the allowed
// role. Each client verifies the server against this PKI's CA.
func (p *PKI) Cases(t testing.TB, allowed, wrong identity.Role) []Case {
	t.Helper()
	other := New(t)
	now := time.Now()
	pair := func(certPEM, keyPEM []byte) []tls.Certificate {
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{c}
	}
	cert := func(q *PKI, role identity.Role, at time.Time, validity time.Duration) []tls.Certificate {
		return pair(q.issue(t, role, "test-client", at, validity))
	}
	return []Case{
		{Name: "no client certificate", Client: p.ClientTLS(nil)},
		{Name: "another CA", Client: p.ClientTLS(cert(other, allowed, now, 0))},
		{Name: "expired", Client: p.ClientTLS(cert(p, allowed, now.Add(-48*time.Hour), time.Hour))},
		{Name: "wrong role " + string(wrong), Client: p.ClientTLS(cert(p, wrong, now, 0))},
		{Name: "role " + string(allowed), Client: p.ClientTLS(cert(p, allowed, now, 0)), Allowed: true},
	}
}

// ClientTLS returns a client config presenting certs that trusts this
// PKI's CA and checks the server's name "localhost".
func (p *PKI) ClientTLS(certs []tls.Certificate) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(p.CA.Cert)
	return &tls.Config{RootCAs: pool, Certificates: certs, ServerName: "localhost", MinVersion: tls.VersionTLS12}
}

// WriteFile writes data to path or fails t.
func WriteFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
