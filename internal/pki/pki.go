// Package pki is Portico's platform certificate authority: it creates a CA
// for a trust domain (ECDSA P-256), issues short-lived workload
// certificates whose one URI SAN is the workload's SPIFFE ID, and tells
// when a certificate is due for renewal.
//
// Files are the interface: a workload needs only its certificate, its key
// and the CA bundle, so users who bring their own PKI (cert-manager, Vault,
// SPIRE) write the same three files. Every file is written atomically
// (temporary file, then rename), so a workload reloading its files never
// reads half of one, and keys are written 0600.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/portico-io/portico/internal/atomicfile"
	"github.com/portico-io/portico/internal/identity"
)

// Defaults.
const (
	DefaultCAValidity       = 5 * 365 * 24 * time.Hour
	DefaultWorkloadValidity = 24 * time.Hour
	// DefaultRenewFraction: renew once less than a third of the lifetime is left.
	DefaultRenewFraction = 1.0 / 3
	// backdate covers clock skew between the issuer and the verifiers.
	backdate = 5 * time.Minute
)

// File names inside a CA directory.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// CA is a certificate authority for one trust domain.
type CA struct {
	Cert        *x509.Certificate
	CertPEM     []byte
	Key         crypto.Signer
	TrustDomain string
}

// NewCA creates a self-signed CA for trustDomain. Its URI SAN is
// spiffe://<trustDomain>, as a SPIFFE trust bundle's CA.
func NewCA(trustDomain string, validity time.Duration, now time.Time) (*CA, error) {
	if validity <= 0 {
		validity = DefaultCAValidity
	}
	if _, err := identity.New(trustDomain, identity.Operator, "x"); err != nil {
		return nil, fmt.Errorf("pki: trust domain: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "Portico CA " + trustDomain, Organization: []string{"Portico"}},
		URIs:                  []*url.URL{{Scheme: "spiffe", Host: trustDomain}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	return &CA{Cert: cert, CertPEM: encodeCert(der), Key: key, TrustDomain: trustDomain}, nil
}

// Write writes ca.crt and ca.key (0600) into dir. It refuses to replace an
// existing CA: every certificate it issued would stop verifying.
func (ca *CA) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	for _, f := range []string{CACertFile, CAKeyFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return fmt.Errorf("%w: %s", ErrExists, filepath.Join(dir, f))
		}
	}
	keyPEM, err := encodeKey(ca.Key)
	if err != nil {
		return err
	}
	return WritePair(filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile), ca.CertPEM, keyPEM)
}

// LoadCA reads ca.crt and ca.key from dir.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	cert, err := ParseCert(certPEM)
	if err != nil {
		return nil, err
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA || len(cert.URIs) != 1 || cert.URIs[0].Scheme != "spiffe" {
		return nil, fmt.Errorf("%w: %s is not a Portico CA (no spiffe://<trust-domain> URI SAN)", ErrBadFile, filepath.Join(dir, CACertFile))
	}
	return &CA{Cert: cert, CertPEM: certPEM, Key: key, TrustDomain: cert.URIs[0].Host}, nil
}

// Request describes a workload certificate.
type Request struct {
	Role identity.Role
	Name string
	// DNSNames and IPs are added as SANs so that clients verifying by host
	// name (curl, a browser) can call the workload too.
	DNSNames []string
	IPs      []net.IP
	Validity time.Duration // default DefaultWorkloadValidity
}

// Issue returns a new key and a certificate for it, PEM-encoded: ECDSA
// P-256, server and client authentication, URI SAN
// spiffe://<trust-domain>/<role>/<name>.
func (ca *CA) Issue(req Request, now time.Time) (certPEM, keyPEM []byte, err error) {
	id, err := identity.New(ca.TrustDomain, req.Role, req.Name)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %w", err)
	}
	if req.Validity <= 0 {
		req.Validity = DefaultWorkloadValidity
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(req.Validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.Name, Organization: []string{"Portico"}, OrganizationalUnit: []string{string(req.Role)}},
		URIs:         []*url.URL{id.URI()},
		DNSNames:     req.DNSNames,
		IPAddresses:  req.IPs,
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %w", err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return encodeCert(der), keyPEM, nil
}

// RenewDue reports whether the certificate in certFile has less than
// fraction (default DefaultRenewFraction) of its lifetime left at now, or
// is missing or unreadable.
func RenewDue(certFile string, fraction float64, now time.Time) (bool, error) {
	if fraction <= 0 || fraction >= 1 {
		fraction = DefaultRenewFraction
	}
	b, err := os.ReadFile(certFile)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("pki: %w", err)
	}
	c, err := ParseCert(b)
	if err != nil {
		return true, nil //nolint:nilerr // an unreadable certificate is replaced
	}
	life := c.NotAfter.Sub(c.NotBefore)
	return c.NotAfter.Sub(now) < time.Duration(float64(life)*fraction), nil
}

// Renew reissues the certificate in certFile (same identity, same DNS and
// IP SANs, validity as the old one unless validity > 0) with a new key when
// RenewDue says so, and writes both files. renewed reports whether it did.
func (ca *CA) Renew(certFile, keyFile string, fraction float64, validity time.Duration, now time.Time) (renewed bool, err error) {
	due, err := RenewDue(certFile, fraction, now)
	if err != nil || !due {
		return false, err
	}
	b, err := os.ReadFile(certFile)
	if err != nil {
		return false, fmt.Errorf("pki: %w", err)
	}
	old, err := ParseCert(b)
	if err != nil {
		return false, fmt.Errorf("pki: %s: %w (issue a new one instead)", certFile, err)
	}
	id, err := identity.FromCert(old)
	if err != nil {
		return false, fmt.Errorf("pki: %s: %w", certFile, err)
	}
	if id.TrustDomain != ca.TrustDomain {
		return false, fmt.Errorf("pki: %s is of trust domain %s, the CA of %s", certFile, id.TrustDomain, ca.TrustDomain)
	}
	if validity <= 0 {
		validity = old.NotAfter.Sub(old.NotBefore) - backdate
	}
	certPEM, keyPEM, err := ca.Issue(Request{Role: id.Role, Name: id.Name, DNSNames: old.DNSNames, IPs: old.IPAddresses, Validity: validity}, now)
	if err != nil {
		return false, err
	}
	return true, WritePair(certFile, keyFile, certPEM, keyPEM)
}

// WritePair writes a certificate and its key atomically, the key 0600.
// The key is written first: a watcher that sees the new certificate then
// finds its key.
func WritePair(certFile, keyFile string, certPEM, keyPEM []byte) error {
	if err := atomicfile.Write(keyFile, keyPEM, 0o600); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := atomicfile.Write(certFile, certPEM, 0o644); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}

// ParseCert parses the first PEM certificate of b.
func ParseCert(b []byte) (*x509.Certificate, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("%w: no PEM certificate", ErrBadFile)
		}
		if blk.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", ErrBadFile, err)
			}
			return c, nil
		}
	}
}

func parseKey(b []byte) (crypto.Signer, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%w: no PEM key", ErrBadFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadFile, err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%w: key cannot sign", ErrBadFile)
	}
	return s, nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	return n, nil
}

// Errors.
var (
	// ErrExists is a CA that would be overwritten.
	ErrExists = errors.New("pki: already exists")
	// ErrBadFile is a file that is not the PEM certificate or key expected.
	ErrBadFile = errors.New("pki: bad file")
)
