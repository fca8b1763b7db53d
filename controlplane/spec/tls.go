package spec

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"github.com/portico-io/portico/controlplane/seal"
)

// ReservedListener is the built-in plain HTTP listener's name.
const ReservedListener = "ingress_http"

// ReservedSecretPrefix starts the names of the secrets the control plane
// compiles itself (the gateways' workload identity and platform CA).
const ReservedSecretPrefix = "portico-"

// StatsListener is the static listener of envoy/bootstrap.yaml serving
// /stats/prometheus and /ready; a dynamic one with its name would be
// rejected by Envoy.
const StatsListener = "envoy_stats"

// alpnProtocols are the ALPN values a listener may offer.
var alpnProtocols = []string{"h2", "http/1.1"}

// Validate checks a secret on its own: PEM that parses, and for an inline
// tls secret with PrivateKey a key that matches the certificate. Expired
// certificates are accepted (an operator may be replacing one).
func (s *Secret) Validate() error {
	if err := checkName(s.Name); err != nil {
		return err
	}
	if strings.HasPrefix(s.Name, ReservedSecretPrefix) {
		return fieldErr("name", CodeInvalid, "names starting with %q are reserved for the platform's own secrets", ReservedSecretPrefix)
	}
	inline := s.Certificate != "" || s.PrivateKey != "" || s.SealedPrivateKey != "" || s.CA != ""
	if inline && s.Files != nil {
		return fieldErr("files", CodeInvalid, "inline PEM and files are exclusive")
	}
	if s.PrivateKey != "" && s.SealedPrivateKey != "" {
		return fieldErr("privateKey", CodeInvalid, "privateKey and sealedPrivateKey are exclusive")
	}
	switch s.Type {
	case SecretTLS:
		if s.CA != "" {
			return fieldErr("ca", CodeInvalid, "a tls secret takes certificate and privateKey; use a secret of type ca for CA bundles")
		}
		if f := s.Files; f != nil {
			if f.TrustedCA != "" {
				return fieldErr("files.trustedCa", CodeInvalid, "a tls secret takes certificateChain and privateKey files")
			}
			if err := checkPath("files.certificateChain", f.CertificateChain); err != nil {
				return err
			}
			return checkPath("files.privateKey", f.PrivateKey)
		}
		if s.Certificate == "" {
			return fieldErr("certificate", CodeRequired, "is required (or files)")
		}
		if _, err := ParseCertificates(s.Certificate); err != nil {
			return fieldErr("certificate", CodeInvalid, "%v", err)
		}
		switch {
		case s.PrivateKey != "":
			if err := CheckKeyPair(s.Certificate, s.PrivateKey); err != nil {
				return err
			}
		case s.SealedPrivateKey != "":
			if !seal.IsSealed(s.SealedPrivateKey) {
				return fieldErr("sealedPrivateKey", CodeInvalid, "is not a sealed value")
			}
		default:
			return fieldErr("privateKey", CodeRequired, "is required for an inline tls secret")
		}
	case SecretCA:
		if s.Certificate != "" || s.PrivateKey != "" || s.SealedPrivateKey != "" {
			return fieldErr("certificate", CodeInvalid, "a ca secret takes ca (PEM bundle) only")
		}
		if f := s.Files; f != nil {
			if f.CertificateChain != "" || f.PrivateKey != "" {
				return fieldErr("files", CodeInvalid, "a ca secret takes files.trustedCa only")
			}
			return checkPath("files.trustedCa", f.TrustedCA)
		}
		if s.CA == "" {
			return fieldErr("ca", CodeRequired, "is required (or files.trustedCa)")
		}
		if _, err := ParseCertificates(s.CA); err != nil {
			return fieldErr("ca", CodeInvalid, "%v", err)
		}
	case "":
		return fieldErr("type", CodeRequired, "is required: tls or ca")
	default:
		return fieldErr("type", CodeInvalid, "must be tls or ca")
	}
	return nil
}

// ParseCertificates parses a PEM bundle of one or more certificates; any
// other block or trailing garbage is an error.
func ParseCertificates(bundle string) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	rest := []byte(bundle)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			// Not b.Type: the field must not echo what a private key looks like.
			return nil, fmt.Errorf("PEM block %d is not a CERTIFICATE", len(out))
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %v", len(out), err)
		}
		out = append(out, c)
	}
	if len(strings.TrimSpace(string(rest))) > 0 {
		return nil, fmt.Errorf("data after the last PEM block")
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("must be PEM with at least one CERTIFICATE block")
	}
	return out, nil
}

// CheckKeyPair reports (field privateKey) whether key is a PEM private key
// matching the leaf of the certificate chain.
func CheckKeyPair(certPEM, keyPEM string) error {
	if _, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM)); err != nil {
		if b, _ := pem.Decode([]byte(keyPEM)); b == nil || !strings.Contains(b.Type, "PRIVATE KEY") {
			return fieldErr("privateKey", CodeInvalid, "must be a PEM private key")
		}
		// Not err's text: crypto/tls may quote the input.
		return fieldErr("privateKey", CodeInvalid, "does not match the certificate (or is not a supported RSA, ECDSA or Ed25519 key)")
	}
	return nil
}

func checkPath(field, p string) error {
	if p == "" {
		return fieldErr(field, CodeRequired, "is required")
	}
	if !filepath.IsAbs(p) || strings.ContainsAny(p, "\x00\n") || filepath.Clean(p) != p {
		return fieldErr(field, CodeInvalid, "must be a clean absolute path on the gateway host")
	}
	return nil
}

// Validate checks a listener on its own.
func (l *Listener) Validate() error {
	if err := checkName(l.Name); err != nil {
		return err
	}
	if l.Name == ReservedListener {
		return fieldErr("name", CodeInvalid, "%q is the built-in listener", ReservedListener)
	}
	if l.Name == StatsListener {
		return fieldErr("name", CodeInvalid, "%q is the gateway bootstrap's stats listener", StatsListener)
	}
	if l.Address != "" {
		if _, err := netip.ParseAddr(l.Address); err != nil {
			return fieldErr("address", CodeInvalid, "must be an IP address")
		}
	}
	if l.Port == 0 || l.Port > 65535 {
		return fieldErr("port", CodeInvalid, "must be 1-65535")
	}
	if l.MaxRequestHeadersKB > 8192 {
		return fieldErr("maxRequestHeadersKb", CodeInvalid, "must be at most 8192 (Envoy's limit)")
	}
	if l.PreAuthLimit != nil {
		if err := l.PreAuthLimit.Validate(); err != nil {
			return prefixed("preAuthLimit.", err)
		}
	}
	t := l.TLS
	if t == nil {
		return nil
	}
	if len(t.Certificates) == 0 {
		return fieldErr("tls.certificates", CodeRequired, "at least one tls secret is required")
	}
	for i, c := range t.Certificates {
		f := fmt.Sprintf("tls.certificates[%d]", i)
		if checkName(c) != nil {
			return fieldErr(f, CodeInvalid, "must be a secret name")
		}
		if slices.Index(t.Certificates, c) != i {
			return fieldErr(f, CodeConflict, "secret %q listed twice", c)
		}
	}
	if t.ClientCA != "" && checkName(t.ClientCA) != nil {
		return fieldErr("tls.clientCa", CodeInvalid, "must be a secret name")
	}
	if t.RequireClientCert && t.ClientCA == "" {
		return fieldErr("tls.clientCa", CodeRequired, "is required with requireClientCert")
	}
	switch t.MinVersion {
	case "", TLS12, TLS13:
	default:
		return fieldErr("tls.minVersion", CodeInvalid, "must be 1.2 or 1.3 (older versions are not offered)")
	}
	for i, p := range t.ALPN {
		if !slices.Contains(alpnProtocols, p) {
			return fieldErr(fmt.Sprintf("tls.alpn[%d]", i), CodeInvalid, "must be h2 or http/1.1")
		}
		if slices.Index(t.ALPN, p) != i {
			return fieldErr(fmt.Sprintf("tls.alpn[%d]", i), CodeConflict, "%q listed twice", p)
		}
	}
	return nil
}

// refs are a listener's references: its certificates and client CA.
func (l *Listener) refs() []Ref {
	if l.TLS == nil {
		return nil
	}
	var refs []Ref
	for i, c := range l.TLS.Certificates {
		refs = append(refs, Ref{Field: fmt.Sprintf("tls.certificates[%d]", i), Kind: KindSecret, Name: c, Type: SecretTLS})
	}
	if l.TLS.ClientCA != "" {
		refs = append(refs, Ref{Field: "tls.clientCa", Kind: KindSecret, Name: l.TLS.ClientCA, Type: SecretCA})
	}
	return refs
}

// refs are a cluster's references: the secrets of its upstream TLS.
func (c *Cluster) refs() []Ref {
	if c.TLS == nil {
		return nil
	}
	var refs []Ref
	if c.TLS.CASecret != "" {
		refs = append(refs, Ref{Field: "tls.caSecret", Kind: KindSecret, Name: c.TLS.CASecret, Type: SecretCA})
	}
	if c.TLS.ClientCertificate != "" {
		refs = append(refs, Ref{Field: "tls.clientCertificate", Kind: KindSecret, Name: c.TLS.ClientCertificate, Type: SecretTLS})
	}
	return refs
}

// SecretUsers lists, in order, the resources and fields referring to
// secret name ("listeners/https: tls.certificates[0]").
func (c *Config) SecretUsers(name string) []string { return c.referrers(KindSecret, name) }

// ReferencedSecrets returns the names of every secret a resource (a
// listener or cluster) refers to, sorted.
func (c *Config) ReferencedSecrets() []string { return c.referenced(KindSecret) }

// validateTLS checks listeners and secret references: referenced secrets
// exist and have the right type, listener ports do not collide, and no
// listener is named like a proxyless API listener (a route host).
func (c *Config) validateTLS() error {
	clusters, listeners := KindCluster.Info(), KindListener.Info()
	for _, n := range SortedKeys(c.Clusters) {
		if err := c.refError(clusters, n, c.Clusters[n]); err != nil {
			return err
		}
	}
	hosts := map[string]bool{}
	for _, r := range c.Routes {
		for _, h := range r.Match.Hosts {
			hosts[strings.ToLower(h)] = true
		}
	}
	ports := map[uint32]string{}
	for _, n := range SortedKeys(c.Listeners) {
		l := c.Listeners[n]
		f := "listeners/" + n
		if err := c.refError(listeners, n, l); err != nil {
			return err
		}
		if other, dup := ports[l.Port]; dup {
			return fieldErr(f+": port", CodeConflict, "port %d is used by listener %q", l.Port, other)
		}
		ports[l.Port] = n
		if hosts[n] {
			return fieldErr(f+": name", CodeConflict, "a route host has this name (its proxyless gRPC listener is named after it)")
		}
	}
	return nil
}
