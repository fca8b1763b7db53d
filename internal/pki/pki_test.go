package pki_test

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/pki"
)

func TestIssueAndVerify(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, err := pki.NewCA("example.test", 0, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Write(dir); err != nil {
		t.Fatal(err)
	}
	if err := ca.Write(dir); !errors.Is(err, pki.ErrExists) {
		t.Fatalf("second Write = %v, want ErrExists", err)
	}
	loaded, err := pki.LoadCA(dir)
	if err != nil || loaded.TrustDomain != "example.test" || !loaded.Cert.Equal(ca.Cert) {
		t.Fatalf("LoadCA = %+v, %v", loaded, err)
	}
	if st, _ := os.Stat(filepath.Join(dir, pki.CAKeyFile)); st.Mode().Perm() != 0o600 {
		t.Errorf("ca.key mode %v, want 0600", st.Mode().Perm())
	}

	certPEM, _, err := loaded.Issue(pki.Request{Role: identity.Scheduler, Name: "scheduler-0", Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pki.ParseCert(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("verify for %v: %v", usage, err)
		}
	}
	id, err := identity.FromCert(c)
	if err != nil || id.String() != "spiffe://example.test/scheduler/scheduler-0" {
		t.Fatalf("identity %v, %v", id, err)
	}
	if d := c.NotAfter.Sub(now); d > time.Hour || d < time.Hour-2*time.Second { // X.509 times are whole seconds
		t.Errorf("validity %v, want 1h", d)
	}
	if _, _, err := loaded.Issue(pki.Request{Role: "root", Name: "x"}, now); !errors.Is(err, identity.ErrBadID) {
		t.Errorf("an unknown role was issued: %v", err)
	}
}

func TestRenewDue(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, err := pki.NewCA(identity.DefaultTrustDomain, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	cert, key := filepath.Join(dir, "w.crt"), filepath.Join(dir, "w.key")
	if due, err := pki.RenewDue(cert, 0, now); !due || err != nil {
		t.Fatalf("a missing certificate: due=%v, %v", due, err)
	}
	certPEM, keyPEM, err := ca.Issue(pki.Request{Role: identity.Worker, Name: "w", Validity: 30 * time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.WritePair(cert, key, certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(key); st.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v, want 0600", st.Mode().Perm())
	}
	// Lifetime 30h05m (backdated 5 min); a third is about 10h.
	for _, tc := range []struct {
		at  time.Duration
		due bool
	}{{0, false}, {19 * time.Hour, false}, {21 * time.Hour, true}, {31 * time.Hour, true}} {
		if due, err := pki.RenewDue(cert, 0, now.Add(tc.at)); due != tc.due || err != nil {
			t.Errorf("at +%v: due=%v (%v), want %v", tc.at, due, err, tc.due)
		}
	}
}

func TestRenewKeepsIdentityAndNames(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, err := pki.NewCA(identity.DefaultTrustDomain, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	cert, key := filepath.Join(dir, "kv.crt"), filepath.Join(dir, "kv.key")
	certPEM, keyPEM, err := ca.Issue(pki.Request{Role: identity.KVNode, Name: "kv-1", DNSNames: []string{"localhost"}, Validity: 3 * time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.WritePair(cert, key, certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	if renewed, err := ca.Renew(cert, key, 0, 0, now); renewed || err != nil {
		t.Fatalf("a fresh certificate was renewed: %v, %v", renewed, err)
	}
	later := now.Add(150 * time.Minute)
	if renewed, err := ca.Renew(cert, key, 0, 0, later); !renewed || err != nil {
		t.Fatalf("a certificate with 30 of 185 minutes left was not renewed: %v, %v", renewed, err)
	}
	b, _ := os.ReadFile(cert)
	c, err := pki.ParseCert(b)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := identity.FromCert(c)
	if id.String() != "spiffe://portico.local/kvnode/kv-1" || len(c.DNSNames) != 1 || c.DNSNames[0] != "localhost" {
		t.Errorf("renewed certificate: %s %v", id, c.DNSNames)
	}
	if d := c.NotAfter.Sub(later); d < 3*time.Hour-2*time.Second || d > 3*time.Hour {
		t.Errorf("renewed validity %v, want the old one's 3h", d)
	}
}
