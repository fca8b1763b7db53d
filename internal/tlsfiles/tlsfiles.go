// Package tlsfiles gives a workload mutual TLS from three files — its
// certificate, its key and the CA bundle — and keeps following them: files
// rewritten by `porticoctl certs renew`, cert-manager or a kubelet secret
// update are picked up by the next handshake, without a restart and
// without touching connections already open.
//
// Servers require a client certificate from the bundle and admit the
// identities an identity.Policy allows (the handshake fails otherwise).
// Clients verify the server's chain against the bundle and its SPIFFE ID
// against a policy instead of a host name, as SPIFFE prescribes: workload
// certificates need not name the addresses they are reached at.
//
// A reload takes all three files or none: a new certificate that does not
// match its key, carries no SPIFFE ID of the trust domain, or does not
// verify against the new bundle (a rotation caught half-written) leaves the
// previous material in force, and the next check tries again.
package tlsfiles

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-io/portico/internal/envflag"
	"github.com/portico-io/portico/internal/identity"
)

// DefaultInterval is how often Run looks at the files.
const DefaultInterval = 5 * time.Second

// Config says where the files are. CertFile, KeyFile and CAFile are required.
type Config struct {
	CertFile, KeyFile, CAFile string
	// TrustDomain is the trust domain of this workload and of the peers it
	// accepts (default identity.DefaultTrustDomain).
	TrustDomain string
	// Interval between looks at the files (default DefaultInterval).
	Interval time.Duration
	// Registerer receives <MetricPrefix>_tls_* metrics; nil registers nowhere.
	Registerer   prometheus.Registerer
	MetricPrefix string // e.g. "portico_extauthz"
	Logger       *slog.Logger
	// OnReload, when set, is called with the new certificate after every
	// load that put new material in force (tests wait on it).
	OnReload func(leaf *x509.Certificate)
}

// LoadOrPlaintext is how a component decides between mutual TLS and
// plaintext: with files named it loads them (Load); without, it returns
// nil only when insecure (the explicit --insecure-plaintext) is set, and
// logs warning, what plaintext exposes, on c.Logger; otherwise it fails
// with ErrNoFiles. Secure by default: plaintext is never an accident.
func LoadOrPlaintext(c Config, insecure bool, warning string) (*Files, error) {
	switch {
	case c.IsSet():
		return Load(c)
	case !insecure:
		return nil, ErrNoFiles
	default:
		if c.Logger != nil {
			c.Logger.Warn(warning)
		}
		return nil, nil
	}
}

// IsSet reports whether c names any file.
func (c Config) IsSet() bool { return c.CertFile != "" || c.KeyFile != "" || c.CAFile != "" }

// Files is a workload's TLS material, reloaded from its files. Safe for
// concurrent use; the tls.Configs it returns read the current material at
// every handshake.
type Files struct {
	cfg Config
	cur atomic.Pointer[material]
	mu  sync.Mutex // serializes Reload
	m   *metrics
}

type material struct {
	cert       tls.Certificate // Leaf set
	id         identity.ID
	pool       *x509.CertPool
	caNotAfter time.Time
	raw        [3][]byte // the three files as read
}

// Load reads the files once; an error names what is wrong with them.
func Load(cfg Config) (*Files, error) {
	if cfg.CertFile == "" || cfg.KeyFile == "" || cfg.CAFile == "" {
		return nil, fmt.Errorf("%w: --tls-cert-file, --tls-key-file and --tls-ca-file are all required", ErrConfig)
	}
	if cfg.TrustDomain == "" {
		cfg.TrustDomain = identity.DefaultTrustDomain
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	f := &Files{cfg: cfg, m: newMetrics(cfg.Registerer, cfg.MetricPrefix)}
	if _, err := f.Reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// Run looks at the files every Interval until ctx is done and reloads them
// when they change. It returns nil when ctx is done.
func (f *Files) Run(ctx context.Context) error {
	t := time.NewTicker(f.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if _, err := f.Reload(); err != nil {
				f.cfg.Logger.Warn("tls: files changed but cannot be used; keeping the previous certificate", "err", err)
			}
		}
	}
}

// Reload reads the files and, when they changed and form a valid set,
// makes them current. changed reports whether the material was replaced.
func (f *Files) Reload() (changed bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var raw [3][]byte
	for i, p := range []string{f.cfg.CertFile, f.cfg.KeyFile, f.cfg.CAFile} {
		if raw[i], err = os.ReadFile(p); err != nil {
			f.m.reloads.WithLabelValues("error").Inc()
			return false, fmt.Errorf("tls: %w", err)
		}
	}
	if cur := f.cur.Load(); cur != nil && bytes.Equal(cur.raw[0], raw[0]) && bytes.Equal(cur.raw[1], raw[1]) && bytes.Equal(cur.raw[2], raw[2]) {
		return false, nil
	}
	m, err := f.parse(raw)
	if err != nil {
		f.m.reloads.WithLabelValues("error").Inc()
		return false, err
	}
	first := f.cur.Load() == nil
	f.cur.Store(m)
	f.m.reloads.WithLabelValues("ok").Inc()
	f.m.expiry.WithLabelValues("workload").Set(float64(m.cert.Leaf.NotAfter.Unix()))
	f.m.expiry.WithLabelValues("ca").Set(float64(m.caNotAfter.Unix()))
	if !first {
		f.cfg.Logger.Info("tls: reloaded certificate", "id", m.id.String(), "notAfter", m.cert.Leaf.NotAfter)
	}
	if f.cfg.OnReload != nil {
		f.cfg.OnReload(m.cert.Leaf)
	}
	return true, nil
}

func (f *Files) parse(raw [3][]byte) (*material, error) {
	cert, err := tls.X509KeyPair(raw[0], raw[1])
	if err != nil {
		return nil, fmt.Errorf("%w: %s and %s: %v", ErrFiles, f.cfg.CertFile, f.cfg.KeyFile, err)
	}
	id, err := identity.FromCert(cert.Leaf)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrFiles, f.cfg.CertFile, err)
	}
	if err := (identity.Policy{TrustDomain: f.cfg.TrustDomain}).Allow(id); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrFiles, f.cfg.CertFile, err)
	}
	pool := x509.NewCertPool()
	var caNotAfter time.Time
	rest := raw[2]
	for n := 0; ; n++ {
		c, r, ok := nextCert(rest)
		if !ok {
			if n == 0 {
				return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrFiles, f.cfg.CAFile)
			}
			break
		}
		rest = r
		pool.AddCert(c)
		if caNotAfter.IsZero() || c.NotAfter.Before(caNotAfter) {
			caNotAfter = c.NotAfter
		}
	}
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("%w: %s does not verify against %s: %v", ErrFiles, f.cfg.CertFile, f.cfg.CAFile, err)
	}
	return &material{cert: cert, id: id, pool: pool, caNotAfter: caNotAfter, raw: raw}, nil
}

// nextCert returns the first parseable PEM certificate of b and what
// follows it.
func nextCert(b []byte) (*x509.Certificate, []byte, bool) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, nil, false
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(blk.Bytes); err == nil {
			return c, b, true
		}
	}
}

// ID returns this workload's identity, from its current certificate.
func (f *Files) ID() identity.ID { return f.cur.Load().id }

// TrustDomain returns the trust domain peers must belong to.
func (f *Files) TrustDomain() string { return f.cfg.TrustDomain }

// GetClientCertificate returns the workload certificate in force, for a
// tls.Config of a client this package does not build (a Redis or Postgres
// driver's).
func (f *Files) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	c := f.cur.Load().cert
	return &c, nil
}

// Pool returns the current CA bundle.
func (f *Files) Pool() *x509.CertPool { return f.cur.Load().pool }

// ServerConfig returns a server configuration that requires a client
// certificate from the bundle whose identity p allows (p's trust domain
// defaults to this workload's). nextProtos is the ALPN list (gRPC adds h2
// itself; an HTTP server that speaks h2 passes "h2", "http/1.1").
func (f *Files) ServerConfig(p identity.Policy, nextProtos ...string) *tls.Config {
	return f.serverConfig(tls.RequireAndVerifyClientCert, p, nextProtos)
}

// APIServerConfig serves a port that people and scripts call too (the admin,
// scheduler and kvnode HTTP APIs, RESP): the server presents its
// certificate, and a client certificate is optional — those callers
// authenticate with tokens or AUTH — but one that is presented must chain
// to the bundle and carry an identity of the trust domain, which handlers
// then read with identity.FromRequest.
func (f *Files) APIServerConfig(nextProtos ...string) *tls.Config {
	return f.serverConfig(tls.VerifyClientCertIfGiven, identity.Policy{}, nextProtos)
}

// serverConfig takes the current material at every handshake, so a reload
// reaches the next connection; a client certificate, when there is one,
// must carry an identity p allows.
func (f *Files) serverConfig(auth tls.ClientAuthType, p identity.Policy, nextProtos []string) *tls.Config {
	if p.TrustDomain == "" {
		p.TrustDomain = f.cfg.TrustDomain
	}
	verify := func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 && auth == tls.VerifyClientCertIfGiven {
			return nil
		}
		id, err := identity.FromConnState(&cs)
		if err != nil {
			return err
		}
		return p.Allow(id)
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := f.cur.Load()
			return &tls.Config{
				MinVersion:       tls.VersionTLS12,
				Certificates:     []tls.Certificate{m.cert},
				ClientAuth:       auth,
				ClientCAs:        m.pool,
				NextProtos:       nextProtos,
				VerifyConnection: verify,
			}, nil
		},
	}
}

// ClientConfig returns a client configuration that presents this
// workload's certificate and accepts a server whose chain verifies against
// the bundle and whose identity p allows (p's trust domain defaults to
// this workload's). The server's host name is not checked: its SPIFFE ID is.
func (f *Files) ClientConfig(p identity.Policy) *tls.Config {
	if p.TrustDomain == "" {
		p.TrustDomain = f.cfg.TrustDomain
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Go's verification checks a host name; VerifyConnection below does
		// the chain against the current bundle and the SPIFFE ID instead.
		InsecureSkipVerify:   true, //nolint:gosec // verified in VerifyConnection
		GetClientCertificate: f.GetClientCertificate,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return f.verifyServer(cs.PeerCertificates, p)
		},
	}
}

func (f *Files) verifyServer(chain []*x509.Certificate, p identity.Policy) error {
	if len(chain) == 0 {
		return fmt.Errorf("%w: server sent no certificate", identity.ErrNoIdentity)
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: f.cur.Load().pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("tls: server certificate: %w", err)
	}
	id, err := identity.FromCert(chain[0])
	if err != nil {
		return err
	}
	return p.Allow(id)
}

// Flags are the TLS flags every binary takes (ARCHITECTURE.md, "Trust and
// identity").
type Flags struct {
	CertFile, KeyFile, CAFile, TrustDomain *string
}

// RegisterFlags defines --tls-cert-file, --tls-key-file, --tls-ca-file and
// --trust-domain (env PORTICO_TLS_CERT_FILE, PORTICO_TLS_KEY_FILE,
// PORTICO_TLS_CA_FILE, PORTICO_TRUST_DOMAIN) on fs.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	return &Flags{
		CertFile:    envflag.String(fs, "tls-cert-file", "PORTICO_TLS_CERT_FILE", "", "this workload's certificate (PEM); reloaded when it changes"),
		KeyFile:     envflag.String(fs, "tls-key-file", "PORTICO_TLS_KEY_FILE", "", "the certificate's private key (PEM)"),
		CAFile:      envflag.String(fs, "tls-ca-file", "PORTICO_TLS_CA_FILE", "", "CA bundle that peers' certificates must chain to (PEM)"),
		TrustDomain: envflag.String(fs, "trust-domain", "PORTICO_TRUST_DOMAIN", identity.DefaultTrustDomain, "SPIFFE trust domain of this workload and its peers"),
	}
}

// Config returns the files the flags name.
func (fl *Flags) Config() Config {
	return Config{CertFile: *fl.CertFile, KeyFile: *fl.KeyFile, CAFile: *fl.CAFile, TrustDomain: *fl.TrustDomain}
}

// Errors.
var (
	// ErrConfig is a Config missing one of the three files.
	ErrConfig = errors.New("tls: bad config")
	// ErrFiles is a set of files that does not form a usable identity.
	ErrFiles = errors.New("tls: unusable files")
	// ErrNoFiles is no certificate files where plaintext was not asked for.
	ErrNoFiles = errors.New("tls: no certificate files (--tls-cert-file, --tls-key-file, --tls-ca-file), and --insecure-plaintext not given")
)

type metrics struct {
	expiry  *prometheus.GaugeVec
	reloads *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, prefix string) *metrics {
	if prefix == "" {
		prefix = "portico"
	}
	m := &metrics{
		expiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: prefix + "_tls_certificate_expiry_timestamp_seconds",
			Help: "When the certificate in force expires (Unix seconds): the workload's own, and the first CA of the bundle to expire.",
		}, []string{"certificate"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "_tls_reloads_total",
			Help: "Loads of the TLS files by result: ok, or error (the previous material stays in force).",
		}, []string{"result"}),
	}
	if reg != nil {
		m.expiry = register(reg, m.expiry)
		m.reloads = register(reg, m.reloads)
	}
	return m
}

// register registers c, or returns the collector already registered under
// its name (several Files in one process, as in tests).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}
