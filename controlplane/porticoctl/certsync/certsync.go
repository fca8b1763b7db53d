// Package certsync keeps the workload certificates of a Kubernetes
// namespace issued and fresh, as Secrets, from a platform CA kept in a
// Secret beside them. It is what the Helm chart's hook Job and renewal
// CronJob run (`porticoctl certs k8s-sync`).
//
// Every Secret it writes holds the three files a Portico workload reads —
// tls.crt, tls.key, ca.crt — so a pod mounts it as a directory and the
// kubelet's update of that volume is the rotation: the binaries re-read
// their files, nothing restarts.
//
// Contract:
//   - The CA Secret (<prefix>ca) is created once and reused: Sync never
//     replaces it, because every certificate it signed would stop
//     verifying. A CA of another trust domain is an error, not a reason to
//     re-key.
//   - A workload Secret (<prefix><name>) is (re)issued when it is missing,
//     unreadable, not signed by the CA, for another identity or DNS names,
//     carries another CA bundle, or is due for renewal by pki.RenewDue's
//     rule; otherwise it is left alone, so running Sync often is cheap and
//     changes nothing.
//   - Writes are optimistic (resourceVersion); a Secret another run wrote
//     meanwhile is read again and judged once more.
package certsync

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/portico-io/portico/controlplane/porticoctl/kubesecret"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/pki"
)

// Keys of every Secret Sync writes (the kubernetes.io/tls layout with the
// CA bundle beside it, as cert-manager writes them).
const (
	KeyCert = "tls.crt"
	KeyKey  = "tls.key"
	KeyCA   = "ca.crt"
	// CAName is the suffix of the CA Secret's name.
	CAName = "ca"
)

// Annotations Sync puts on workload Secrets, for people reading them.
const (
	AnnotationID       = "portico.io/spiffe-id"
	AnnotationNotAfter = "portico.io/not-after"
	labelManagedBy     = "app.kubernetes.io/managed-by"
	managedBy          = "porticoctl"
)

// Store is the Secret access Sync needs; *kubesecret.Client is one.
type Store interface {
	Get(ctx context.Context, name string) (*kubesecret.Secret, error)
	Create(ctx context.Context, s *kubesecret.Secret) (*kubesecret.Secret, error)
	Update(ctx context.Context, s *kubesecret.Secret) (*kubesecret.Secret, error)
}

var _ Store = (*kubesecret.Client)(nil)

// Workload is one certificate to keep: identity
// spiffe://<trust-domain>/<Role>/<Name> in the Secret <prefix><Name>.
type Workload struct {
	Role     identity.Role
	Name     string
	DNSNames []string
}

// Config says which certificates to keep. SecretPrefix and Workloads are
// required; zero values of the rest mean the defaults.
type Config struct {
	TrustDomain   string        // default identity.DefaultTrustDomain
	SecretPrefix  string        // e.g. "portico-tls-"
	Workloads     []Workload    // names unique, none equal to CAName
	Validity      time.Duration // workload certificates; default pki.DefaultWorkloadValidity
	RenewFraction float64       // default pki.DefaultRenewFraction
	CAValidity    time.Duration // a new CA; default pki.DefaultCAValidity
	// Labels go on every Secret Sync creates (besides managed-by).
	Labels map[string]string
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

func (c *Config) validate() error {
	if c.SecretPrefix == "" {
		return fmt.Errorf("%w: a secret prefix is required", ErrConfig)
	}
	if len(c.Workloads) == 0 {
		return fmt.Errorf("%w: no workloads", ErrConfig)
	}
	if c.TrustDomain == "" {
		c.TrustDomain = identity.DefaultTrustDomain
	}
	if c.Validity <= 0 {
		c.Validity = pki.DefaultWorkloadValidity
	}
	if c.RenewFraction <= 0 || c.RenewFraction >= 1 {
		c.RenewFraction = pki.DefaultRenewFraction
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	seen := map[string]bool{}
	for _, w := range c.Workloads {
		if _, err := identity.New(c.TrustDomain, w.Role, w.Name); err != nil {
			return fmt.Errorf("%w: workload %s:%s: %v", ErrConfig, w.Role, w.Name, err)
		}
		if w.Name == CAName || seen[w.Name] {
			return fmt.Errorf("%w: workload name %q is taken (names are unique and %q is the CA's Secret)", ErrConfig, w.Name, CAName)
		}
		seen[w.Name] = true
	}
	return nil
}

// Action is what Sync did with one Secret.
type Action string

// Actions.
const (
	Created Action = "created" // a new Secret (the CA, or a workload's first certificate)
	Renewed Action = "renewed" // a workload Secret reissued
	Kept    Action = "kept"    // nothing to do
)

// Result reports one Secret.
type Result struct {
	Secret   string
	ID       string // SPIFFE ID (the trust domain for the CA)
	Action   Action
	Reason   string // why it was (re)issued; "" when kept
	NotAfter time.Time
}

// Sync makes the CA Secret and every workload's Secret hold what Config
// asks, and reports each. It goes on past a failing workload and returns
// every error joined; a CA it cannot use stops it.
func Sync(ctx context.Context, store Store, cfg Config) ([]Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ca, res, err := ensureCA(ctx, store, &cfg)
	if err != nil {
		return nil, err
	}
	out := []Result{res}
	var errs []error
	for _, w := range cfg.Workloads {
		r, err := ensureWorkload(ctx, store, &cfg, ca, w)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

// ensureCA loads the CA Secret, creating it only when there is none.
func ensureCA(ctx context.Context, store Store, cfg *Config) (*pki.CA, Result, error) {
	name := cfg.SecretPrefix + CAName
	s, err := store.Get(ctx, name)
	if errors.Is(err, kubesecret.ErrNotFound) {
		ca, created, cerr := createCA(ctx, store, cfg, name)
		if cerr != nil {
			return nil, Result{}, cerr
		}
		if created {
			return ca, Result{Secret: name, ID: "spiffe://" + ca.TrustDomain, Action: Created, Reason: "no CA", NotAfter: ca.Cert.NotAfter}, nil
		}
		// Another run created it first: use that one.
		s, err = store.Get(ctx, name)
	}
	if err != nil {
		return nil, Result{}, fmt.Errorf("certsync: CA Secret %s: %w", name, err)
	}
	ca, err := parseCA(s, cfg.TrustDomain, cfg.Now())
	if err != nil {
		return nil, Result{}, fmt.Errorf("certsync: CA Secret %s: %w", name, err)
	}
	return ca, Result{Secret: name, ID: "spiffe://" + ca.TrustDomain, Action: Kept, NotAfter: ca.Cert.NotAfter}, nil
}

// createCA creates a CA and its Secret; created is false when another run
// created the Secret first.
func createCA(ctx context.Context, store Store, cfg *Config, name string) (ca *pki.CA, created bool, err error) {
	ca, err = pki.NewCA(cfg.TrustDomain, cfg.CAValidity, cfg.Now())
	if err != nil {
		return nil, false, err
	}
	keyPEM, err := encodeKey(ca.Key)
	if err != nil {
		return nil, false, err
	}
	sec := &kubesecret.Secret{
		Metadata: kubesecret.Metadata{Name: name, Labels: cfg.labels(), Annotations: map[string]string{
			AnnotationID: "spiffe://" + ca.TrustDomain, AnnotationNotAfter: ca.Cert.NotAfter.UTC().Format(time.RFC3339),
		}},
		Type: kubesecret.TypeTLS,
		Data: map[string][]byte{KeyCert: ca.CertPEM, KeyKey: keyPEM, KeyCA: ca.CertPEM},
	}
	switch _, err := store.Create(ctx, sec); {
	case err == nil:
		return ca, true, nil
	case errors.Is(err, kubesecret.ErrExists):
		return nil, false, nil
	default:
		return nil, false, fmt.Errorf("certsync: create CA Secret %s: %w", name, err)
	}
}

// parseCA reads a CA from a Secret's tls.crt and tls.key. A CA is never
// replaced, so one that cannot sign for the trust domain is an error the
// operator must resolve.
func parseCA(s *kubesecret.Secret, trustDomain string, now time.Time) (*pki.CA, error) {
	cert, err := pki.ParseCert(s.Data[KeyCert])
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadCA, KeyCert, err)
	}
	key, err := parseKey(s.Data[KeyKey])
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadCA, KeyKey, err)
	}
	if _, err := tls.X509KeyPair(s.Data[KeyCert], s.Data[KeyKey]); err != nil {
		return nil, fmt.Errorf("%w: key does not match the certificate: %v", ErrBadCA, err)
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("%w: not a CA certificate", ErrBadCA)
	}
	if len(cert.URIs) != 1 || cert.URIs[0].Scheme != "spiffe" || cert.URIs[0].Host != trustDomain {
		return nil, fmt.Errorf("%w: it is not the CA of trust domain %s (URI SANs %v); the trust domain cannot change under an existing CA: delete the Secret to re-key every workload", ErrBadCA, trustDomain, cert.URIs)
	}
	if !now.Before(cert.NotAfter) {
		return nil, fmt.Errorf("%w: expired at %s", ErrBadCA, cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return &pki.CA{Cert: cert, CertPEM: s.Data[KeyCert], Key: key, TrustDomain: trustDomain}, nil
}

// ensureWorkload issues w's certificate when its Secret needs one. A write
// lost to another run (ErrExists, ErrConflict) is judged once more.
func ensureWorkload(ctx context.Context, store Store, cfg *Config, ca *pki.CA, w Workload) (Result, error) {
	name := cfg.SecretPrefix + w.Name
	id, _ := identity.New(cfg.TrustDomain, w.Role, w.Name) // checked by validate
	var lastErr error
	for range 2 {
		cur, err := store.Get(ctx, name)
		if err != nil && !errors.Is(err, kubesecret.ErrNotFound) {
			return Result{}, fmt.Errorf("certsync: %s: %w", name, err)
		}
		now := cfg.Now()
		reason := "no Secret"
		if cur != nil {
			reason = needsIssue(cur, ca, id, w.DNSNames, cfg.RenewFraction, now)
			if reason == "" {
				c, _ := pki.ParseCert(cur.Data[KeyCert])
				return Result{Secret: name, ID: id.String(), Action: Kept, NotAfter: c.NotAfter}, nil
			}
		}
		certPEM, keyPEM, err := ca.Issue(pki.Request{Role: w.Role, Name: w.Name, DNSNames: w.DNSNames, Validity: cfg.Validity}, now)
		if err != nil {
			return Result{}, fmt.Errorf("certsync: %s: %w", name, err)
		}
		leaf, _ := pki.ParseCert(certPEM)
		data := map[string][]byte{KeyCert: certPEM, KeyKey: keyPEM, KeyCA: ca.CertPEM}
		notes := map[string]string{AnnotationID: id.String(), AnnotationNotAfter: leaf.NotAfter.UTC().Format(time.RFC3339)}
		if cur == nil {
			sec := &kubesecret.Secret{Metadata: kubesecret.Metadata{Name: name, Labels: cfg.labels(), Annotations: notes}, Type: kubesecret.TypeTLS, Data: data}
			_, err = store.Create(ctx, sec)
			if err == nil {
				return Result{Secret: name, ID: id.String(), Action: Created, Reason: reason, NotAfter: leaf.NotAfter}, nil
			}
		} else {
			// Keep the Secret's type (immutable) and its other metadata;
			// replace the three keys.
			upd := *cur
			upd.Data = data
			upd.Metadata.Annotations = merge(cur.Metadata.Annotations, notes)
			_, err = store.Update(ctx, &upd)
			if err == nil {
				return Result{Secret: name, ID: id.String(), Action: Renewed, Reason: reason, NotAfter: leaf.NotAfter}, nil
			}
		}
		if !errors.Is(err, kubesecret.ErrExists) && !errors.Is(err, kubesecret.ErrConflict) {
			return Result{}, fmt.Errorf("certsync: write %s: %w", name, err)
		}
		lastErr = err
	}
	return Result{}, fmt.Errorf("certsync: %s changed under two attempts, the next run retries: %w", name, lastErr)
}

// needsIssue returns why the Secret must be (re)issued, or "".
func needsIssue(s *kubesecret.Secret, ca *pki.CA, want identity.ID, dns []string, fraction float64, now time.Time) string {
	c, err := pki.ParseCert(s.Data[KeyCert])
	if err != nil {
		return "no readable certificate"
	}
	if _, err := tls.X509KeyPair(s.Data[KeyCert], s.Data[KeyKey]); err != nil {
		return "key missing or not the certificate's"
	}
	if err := c.CheckSignatureFrom(ca.Cert); err != nil {
		return "not signed by the platform CA"
	}
	if got, err := identity.FromCert(c); err != nil || got != want {
		return fmt.Sprintf("identity %v, want %s", got, want)
	}
	if !slices.Equal(sorted(c.DNSNames), sorted(dns)) {
		return fmt.Sprintf("DNS names %v, want %v", c.DNSNames, dns)
	}
	if string(s.Data[KeyCA]) != string(ca.CertPEM) {
		return "ca.crt is not the platform CA"
	}
	if renewDue(c, fraction, now) {
		return fmt.Sprintf("due for renewal (expires %s)", c.NotAfter.UTC().Format(time.RFC3339))
	}
	return ""
}

// renewDue is pki.RenewDue's rule on a parsed certificate (pki.RenewDue
// reads a file): due once less than fraction of the lifetime is left. A
// test holds the two to the same answers.
func renewDue(c *x509.Certificate, fraction float64, now time.Time) bool {
	if fraction <= 0 || fraction >= 1 {
		fraction = pki.DefaultRenewFraction
	}
	life := c.NotAfter.Sub(c.NotBefore)
	return c.NotAfter.Sub(now) < time.Duration(float64(life)*fraction)
}

func (c *Config) labels() map[string]string {
	return merge(c.Labels, map[string]string{labelManagedBy: managedBy})
}

func merge(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func encodeKey(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("certsync: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// parseKey reads a PKCS#8 key (what pki writes) or a SEC 1 EC key (what
// cert-manager and openssl write by default), so a CA made elsewhere can be
// brought in the same Secret.
func parseKey(b []byte) (crypto.Signer, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM key")
	}
	var k any
	var err error
	switch blk.Type {
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(blk.Bytes)
	default:
		k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	}
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, errors.New("key cannot sign")
	}
	return s, nil
}
