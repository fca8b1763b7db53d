package certsync

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/controlplane/porticoctl/kubesecret"
	"github.com/portico-io/portico/controlplane/porticoctl/kubesecret/kubesecrettest"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/pki"
	"github.com/portico-io/portico/internal/tlsfiles"
)

// Sync runs here through the real kubesecret client against
// kubesecrettest, which checks the requests we send; it is not Kubernetes.

const (
	ns     = "portico-test"
	prefix = "portico-tls-"
	td     = "example.test"
)

// t0 is the real time: the certificates issued at t0 are also loaded by
// tlsfiles, which checks them against the wall clock.
var t0 = time.Now().UTC().Truncate(time.Second)

type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func setup(t *testing.T) (*kubesecrettest.Server, *kubesecret.Client, Config, *clock) {
	t.Helper()
	srv := kubesecrettest.New(t, ns, "tok")
	c, err := kubesecret.New(kubesecret.Config{
		Server: srv.URL, TokenFile: filepath.Join(srv.ServiceAccountDir(t), "token"), Namespace: ns,
		RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs,
	})
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{now: t0}
	cfg := Config{
		TrustDomain: td, SecretPrefix: prefix, Validity: 48 * time.Hour, Now: clk.Now,
		Labels: map[string]string{"app.kubernetes.io/instance": "portico"},
		Workloads: []Workload{
			{Role: identity.Gateway, Name: "envoy"},
			{Role: identity.ControlPlane, Name: "controlplane", DNSNames: []string{"portico-controlplane.portico-test.svc"}},
			{Role: identity.KVNode, Name: "kvnode", DNSNames: []string{"*.portico-kvnode-headless.portico-test.svc", "portico-kvnode.portico-test.svc"}},
		},
	}
	return srv, c, cfg, clk
}

func actions(rs []Result) map[string]Action {
	out := map[string]Action{}
	for _, r := range rs {
		out[r.Secret] = r.Action
	}
	return out
}

func writes(reqs []kubesecrettest.Request) []string {
	var out []string
	for _, r := range reqs {
		if r.Method != http.MethodGet {
			out = append(out, r.Method+" "+r.Body.Metadata.Name)
		}
	}
	return out
}

func TestSyncIssuesOnceThenKeepsThenRenews(t *testing.T) {
	srv, c, cfg, clk := setup(t)
	ctx := context.Background()

	rs, err := Sync(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Action{prefix + "ca": Created, prefix + "envoy": Created, prefix + "controlplane": Created, prefix + "kvnode": Created}
	if got := actions(rs); !mapsEqual(got, want) {
		t.Fatalf("first sync: %v", got)
	}
	if got := writes(srv.Requests()); !slices.Equal(got, []string{"POST portico-tls-ca", "POST portico-tls-envoy", "POST portico-tls-controlplane", "POST portico-tls-kvnode"}) {
		t.Fatalf("first sync wrote %v", got)
	}
	caSecret, _ := srv.Secret(prefix + "ca")
	if caSecret.Type != kubesecret.TypeTLS || string(caSecret.Data[KeyCA]) != string(caSecret.Data[KeyCert]) || caSecret.Metadata.Labels["app.kubernetes.io/instance"] != "portico" {
		t.Errorf("CA Secret: type %q, labels %v", caSecret.Type, caSecret.Metadata.Labels)
	}
	for _, w := range cfg.Workloads {
		checkWorkloadSecret(t, srv, w, caSecret.Data[KeyCert], t0)
	}

	// Nothing to do: reads only.
	clk.now = t0.Add(24 * time.Hour)
	rs, err = Sync(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for s, a := range actions(rs) {
		if a != Kept {
			t.Errorf("second sync: %s %s", a, s)
		}
	}
	if got := writes(srv.Requests()); len(got) != 0 {
		t.Fatalf("a sync with nothing due wrote %v", got)
	}

	// Past two thirds of the lifetime: every workload is renewed in place
	// (PUT at the version read), the CA is not touched.
	clk.now = t0.Add(33 * time.Hour)
	before, _ := srv.Secret(prefix + "envoy")
	rs, err = Sync(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a := actions(rs); a[prefix+"ca"] != Kept || a[prefix+"envoy"] != Renewed || a[prefix+"kvnode"] != Renewed {
		t.Fatalf("renewal sync: %v", a)
	}
	reqs := srv.Requests()
	if got := writes(reqs); !slices.Equal(got, []string{"PUT portico-tls-envoy", "PUT portico-tls-controlplane", "PUT portico-tls-kvnode"}) {
		t.Fatalf("renewal wrote %v", got)
	}
	for _, r := range reqs {
		if r.Method == http.MethodPut && r.Name == prefix+"envoy" && r.Body.Metadata.ResourceVersion != before.Metadata.ResourceVersion {
			t.Errorf("PUT at resourceVersion %q, read at %q", r.Body.Metadata.ResourceVersion, before.Metadata.ResourceVersion)
		}
	}
	after, _ := srv.Secret(prefix + "envoy")
	if string(after.Data[KeyKey]) == string(before.Data[KeyKey]) {
		t.Error("renewal kept the old key")
	}
	if caAfter, _ := srv.Secret(prefix + "ca"); string(caAfter.Data[KeyKey]) != string(caSecret.Data[KeyKey]) || caAfter.Metadata.ResourceVersion != caSecret.Metadata.ResourceVersion {
		t.Error("the CA Secret changed")
	}
	for _, w := range cfg.Workloads {
		checkWorkloadSecret(t, srv, w, caSecret.Data[KeyCert], clk.now)
	}
}

// checkWorkloadSecret: the three keys, a certificate the binaries load
// (tlsfiles) with the workload's identity and DNS names, signed by the CA.
func checkWorkloadSecret(t *testing.T, srv *kubesecrettest.Server, w Workload, caPEM []byte, issued time.Time) {
	t.Helper()
	s, ok := srv.Secret(prefix + w.Name)
	if !ok {
		t.Fatalf("no Secret for %s", w.Name)
	}
	if s.Type != kubesecret.TypeTLS || string(s.Data[KeyCA]) != string(caPEM) {
		t.Errorf("%s: type %q, ca.crt is the CA: %v", w.Name, s.Type, string(s.Data[KeyCA]) == string(caPEM))
	}
	leaf, err := pki.ParseCert(s.Data[KeyCert])
	if err != nil {
		t.Fatalf("%s: %v", w.Name, err)
	}
	if _, err := tls.X509KeyPair(s.Data[KeyCert], s.Data[KeyKey]); err != nil {
		t.Errorf("%s: tls.key is not the certificate's: %v", w.Name, err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.Data[KeyCA])
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: issued, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("%s: does not verify against its ca.crt at %s: %v", w.Name, issued, err)
	}
	if issued.Equal(t0) {
		// What the binaries do with the mounted Secret, on the wall clock.
		dir := t.TempDir()
		for k, v := range s.Data {
			if err := os.WriteFile(filepath.Join(dir, k), v, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		f, err := tlsfiles.Load(tlsfiles.Config{CertFile: filepath.Join(dir, KeyCert), KeyFile: filepath.Join(dir, KeyKey), CAFile: filepath.Join(dir, KeyCA), TrustDomain: td})
		if err != nil {
			t.Fatalf("%s: the binaries would refuse these files: %v", w.Name, err)
		}
		if want, _ := identity.New(td, w.Role, w.Name); f.ID() != want {
			t.Errorf("%s: identity %s, want %s", w.Name, f.ID(), want)
		}
	}
	if !slices.Equal(leaf.DNSNames, w.DNSNames) {
		t.Errorf("%s: DNS names %v, want %v", w.Name, leaf.DNSNames, w.DNSNames)
	}
	if leaf.NotAfter.Sub(issued) != 48*time.Hour {
		t.Errorf("%s: valid until %s, issued %s: want 48h", w.Name, leaf.NotAfter, issued)
	}
	if s.Metadata.Annotations[AnnotationID] != "spiffe://"+td+"/"+string(w.Role)+"/"+w.Name {
		t.Errorf("%s: annotations %v", w.Name, s.Metadata.Annotations)
	}
}

// A Secret that no longer matches what is asked is reissued at once: new
// DNS names, another identity, a foreign signature, a stale CA bundle.
func TestSyncReissuesWhatNoLongerMatches(t *testing.T) {
	srv, c, cfg, _ := setup(t)
	ctx := context.Background()
	if _, err := Sync(ctx, c, cfg); err != nil {
		t.Fatal(err)
	}
	srv.Requests()
	foreign, err := pki.NewCA(td, time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	fcert, fkey, err := foreign.Issue(pki.Request{Role: identity.Gateway, Name: "envoy"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	envoy, _ := srv.Secret(prefix + "envoy")
	envoy.Data[KeyCert], envoy.Data[KeyKey] = fcert, fkey
	srv.Put(envoy)
	cp, _ := srv.Secret(prefix + "controlplane")
	cp.Data[KeyCA] = foreign.CertPEM
	srv.Put(cp)
	cfg.Workloads[2].DNSNames = []string{"portico-kvnode.portico-test.svc"}

	rs, err := Sync(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, r := range rs {
		if r.Action == Renewed {
			reasons[r.Secret] = r.Reason
		}
	}
	for name, want := range map[string]string{"envoy": "not signed by the platform CA", "controlplane": "ca.crt is not the platform CA", "kvnode": "DNS names"} {
		if !strings.Contains(reasons[prefix+name], want) {
			t.Errorf("%s: reissue reason %q, want %q", name, reasons[prefix+name], want)
		}
	}
	if len(reasons) != 3 {
		t.Errorf("reissued %v", reasons)
	}
	caSecret, _ := srv.Secret(prefix + "ca")
	for _, w := range cfg.Workloads {
		checkWorkloadSecret(t, srv, w, caSecret.Data[KeyCert], t0)
	}
}

// The CA is never replaced: one of another trust domain stops the sync
// before anything is written.
func TestSyncNeverReplacesTheCA(t *testing.T) {
	srv, c, cfg, _ := setup(t)
	other, err := pki.NewCA("other.test", time.Hour*24*365, t0)
	if err != nil {
		t.Fatal(err)
	}
	key, err := encodeKey(other.Key)
	if err != nil {
		t.Fatal(err)
	}
	srv.Put(kubesecret.Secret{Metadata: kubesecret.Metadata{Name: prefix + "ca"}, Type: kubesecret.TypeTLS,
		Data: map[string][]byte{KeyCert: other.CertPEM, KeyKey: key, KeyCA: other.CertPEM}})
	_, err = Sync(context.Background(), c, cfg)
	if !errors.Is(err, ErrBadCA) || !strings.Contains(err.Error(), "trust domain") {
		t.Fatalf("Sync with a CA of another trust domain: %v", err)
	}
	if got := writes(srv.Requests()); len(got) != 0 {
		t.Fatalf("wrote %v", got)
	}

	// A broken CA Secret (key missing) is an error too, never a new CA.
	s, _ := srv.Secret(prefix + "ca")
	delete(s.Data, KeyKey)
	srv.Put(s)
	if _, err := Sync(context.Background(), c, cfg); !errors.Is(err, ErrBadCA) {
		t.Fatalf("Sync with a CA without its key: %v", err)
	}
	if got := writes(srv.Requests()); len(got) != 0 {
		t.Fatalf("wrote %v", got)
	}
}

// Two runs at once (the install hook and a CronJob run): the CA created by
// the other run is used, and a workload Secret changed between read and
// write is read again instead of overwritten.
func TestSyncLosesRacesGracefully(t *testing.T) {
	srv, c, cfg, clk := setup(t)
	ctx := context.Background()
	// The other run creates the CA just before our POST lands.
	raced := false
	srv.BeforeWrite = func(r kubesecrettest.Request) {
		if r.Method == http.MethodPost && r.Body.Metadata.Name == prefix+"ca" && !raced {
			raced = true
			ca, _ := pki.NewCA(td, 0, t0)
			key, _ := encodeKey(ca.Key)
			srv.Put(kubesecret.Secret{Metadata: kubesecret.Metadata{Name: prefix + "ca"}, Type: kubesecret.TypeTLS,
				Data: map[string][]byte{KeyCert: ca.CertPEM, KeyKey: key, KeyCA: ca.CertPEM}})
		}
	}
	rs, err := Sync(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	caSecret, _ := srv.Secret(prefix + "ca")
	if actions(rs)[prefix+"ca"] != Kept {
		t.Errorf("CA action %v: the other run's CA must be used", actions(rs)[prefix+"ca"])
	}
	for _, w := range cfg.Workloads {
		checkWorkloadSecret(t, srv, w, caSecret.Data[KeyCert], t0)
	}

	// A PUT that loses to another writer: read again, judged again.
	clk.now = t0.Add(40 * time.Hour)
	bumped := false
	srv.BeforeWrite = func(r kubesecrettest.Request) {
		if r.Method == http.MethodPut && r.Name == prefix+"envoy" && !bumped {
			bumped = true
			s, _ := srv.Secret(prefix + "envoy")
			s.Metadata.Annotations["touched"] = "yes"
			srv.Put(s)
		}
	}
	srv.Requests()
	if _, err := Sync(ctx, c, cfg); err != nil {
		t.Fatal(err)
	}
	puts := 0
	for _, w := range writes(srv.Requests()) {
		if w == "PUT "+prefix+"envoy" {
			puts++
		}
	}
	if puts != 2 {
		t.Errorf("%d PUTs of the envoy Secret, want 2 (a conflict, then the retry)", puts)
	}
	s, _ := srv.Secret(prefix + "envoy")
	if s.Metadata.Annotations["touched"] != "yes" {
		t.Error("the retry dropped the other writer's annotation")
	}
	checkWorkloadSecret(t, srv, cfg.Workloads[0], caSecret.Data[KeyCert], clk.now)
}

// With a Role limited to the named Secrets, a workload outside it fails
// alone; the others are still kept.
func TestSyncGoesOnPastAFailingWorkload(t *testing.T) {
	srv, c, cfg, _ := setup(t)
	srv.Allowed = func(verb, name string) bool { return verb == "create" || name != prefix+"kvnode" }
	rs, err := Sync(context.Background(), c, cfg)
	if !errors.Is(err, kubesecret.ErrForbidden) || !strings.Contains(err.Error(), prefix+"kvnode") {
		t.Fatalf("Sync = %v", err)
	}
	if a := actions(rs); a[prefix+"envoy"] != Created || a[prefix+"controlplane"] != Created {
		t.Errorf("results %v", a)
	}
}

func TestConfigIsValidated(t *testing.T) {
	_, c, base, _ := setup(t)
	for name, mut := range map[string]func(*Config){
		"no prefix":      func(c *Config) { c.SecretPrefix = "" },
		"no workloads":   func(c *Config) { c.Workloads = nil },
		"bad role":       func(c *Config) { c.Workloads = []Workload{{Role: "root", Name: "x"}} },
		"bad name":       func(c *Config) { c.Workloads = []Workload{{Role: identity.Gateway, Name: "a/b"}} },
		"the CA's name":  func(c *Config) { c.Workloads = []Workload{{Role: identity.Gateway, Name: CAName}} },
		"duplicate name": func(c *Config) { c.Workloads = append(c.Workloads, Workload{Role: identity.Worker, Name: "envoy"}) },
		"bad domain":     func(c *Config) { c.TrustDomain = "Not A Domain" },
	} {
		cfg := base
		cfg.Workloads = slices.Clone(base.Workloads)
		mut(&cfg)
		if _, err := Sync(context.Background(), c, cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

// renewDue must answer as pki.RenewDue does on the same certificate.
func TestRenewDueIsPKIsRule(t *testing.T) {
	ca, err := pki.NewCA(td, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := ca.Issue(pki.Request{Role: identity.Gateway, Name: "g", Validity: 30 * time.Hour}, t0)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "g.crt")
	if err := os.WriteFile(file, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	leaf, _ := pki.ParseCert(certPEM)
	for _, fraction := range []float64{0, pki.DefaultRenewFraction, 0.5, 0.9, 1.5} {
		for h := -1; h <= 32; h++ {
			now := t0.Add(time.Duration(h) * time.Hour)
			want, err := pki.RenewDue(file, fraction, now)
			if err != nil {
				t.Fatal(err)
			}
			if got := renewDue(leaf, fraction, now); got != want {
				t.Errorf("fraction %v at +%dh: renewDue %v, pki.RenewDue %v", fraction, h, got, want)
			}
		}
	}
}

// parseKey reads the SEC 1 keys cert-manager and openssl write, so a CA
// brought in from elsewhere loads.
func TestParseKeyAcceptsSEC1(t *testing.T) {
	ca, err := pki.NewCA(td, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(ca.Key.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	sec1 := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	if _, err := parseKey(sec1); err != nil {
		t.Fatal(err)
	}
	if _, err := parseKey([]byte("junk")); err == nil {
		t.Fatal("parsed junk")
	}
}

func mapsEqual(a, b map[string]Action) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
