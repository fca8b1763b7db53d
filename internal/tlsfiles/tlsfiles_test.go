package tlsfiles_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlsfiles"
	"github.com/portico-io/portico/internal/tlstest"
)

// serve accepts TLS connections on loopback and answers each with the
// serial number of the certificate it presented, until the test ends.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				if err := tc.Handshake(); err != nil {
					return
				}
				cs := tc.ConnectionState()
				_, _ = io.WriteString(c, cs.PeerCertificates[0].Subject.CommonName+" "+
					tc.ConnectionState().VerifiedChains[0][0].SerialNumber.String()+"\n")
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	return lis.Addr().String()
}

// call dials addr, completes the handshake and reads the server's line.
func call(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 256)
	n, err := c.Read(b) // TLS 1.3: a refused client certificate surfaces here
	return string(b[:n]), err
}

func TestServerRefusesWhatThePolicyDoesNot(t *testing.T) {
	p := tlstest.New(t)
	srv := p.Load(t, identity.ExtAuthz, "extauthz")
	addr := serve(t, srv.ServerConfig(identity.Policy{Roles: []identity.Role{identity.Gateway}}))
	for _, tc := range p.Cases(t, identity.Gateway, identity.ExtAuthz) {
		t.Run(tc.Name, func(t *testing.T) {
			got, err := call(addr, tc.Client)
			if tc.Allowed && (err != nil || !strings.HasPrefix(got, "test-client ")) {
				t.Fatalf("refused: %q, %v", got, err)
			}
			if !tc.Allowed && err == nil {
				t.Fatalf("served: %q", got)
			}
		})
	}
}

func TestClientChecksTheServersIdentity(t *testing.T) {
	p := tlstest.New(t)
	client := p.Load(t, identity.ExtAuthz, "extauthz")
	want := identity.Policy{Roles: []identity.Role{identity.ControlPlane}}
	anyone := identity.Policy{}
	for _, tc := range []struct {
		name   string
		server *tlsfiles.Files
		ok     bool
	}{
		{"the right role", p.Load(t, identity.ControlPlane, "cp"), true},
		{"a wrong role", p.Load(t, identity.KVNode, "kv"), false},
		{"another CA", tlstest.New(t).Load(t, identity.ControlPlane, "cp"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := serve(t, tc.server.ServerConfig(anyone))
			_, err := call(addr, client.ClientConfig(want))
			if tc.ok != (err == nil) {
				t.Fatalf("ok=%v, err=%v", tc.ok, err)
			}
		})
	}
}

// Rotation: files rewritten while connections are open. New handshakes
// present the new certificate; an open connection is untouched; a
// half-written rotation (a certificate that does not match its key) leaves
// the previous material in force.
func TestReloadRotatesWithoutDroppingConnections(t *testing.T) {
	p := tlstest.New(t)
	reg := prometheus.NewRegistry()
	cfg := p.Files(t, identity.ControlPlane, "cp")
	cfg.Registerer, cfg.MetricPrefix = reg, "portico_test"
	srv, err := tlsfiles.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client := p.Load(t, identity.Gateway, "gw")
	addr := serve(t, srv.ServerConfig(identity.Policy{}))

	serial := func(c *tls.Conn) string { return c.ConnectionState().PeerCertificates[0].SerialNumber.String() }
	open, err := tls.Dial("tcp", addr, client.ClientConfig(identity.Policy{}))
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	before := serial(open)

	p.Reissue(t, cfg, identity.ControlPlane, "cp")
	if changed, err := srv.Reload(); err != nil || !changed {
		t.Fatalf("Reload after rotation = %v, %v", changed, err)
	}
	if changed, err := srv.Reload(); err != nil || changed {
		t.Fatalf("Reload of unchanged files = %v, %v", changed, err)
	}
	next, err := tls.Dial("tcp", addr, client.ClientConfig(identity.Policy{}))
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	rotated := serial(next)
	if rotated == before {
		t.Fatal("a new handshake still presents the old certificate")
	}
	if _, err := open.Write([]byte("still here\n")); err != nil {
		t.Fatalf("the connection opened before the rotation broke: %v", err)
	}

	// Half a rotation: a new key without its certificate.
	other := p.Files(t, identity.ControlPlane, "other")
	key, err := os.ReadFile(other.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	tlstest.WriteFile(t, cfg.KeyFile, key)
	if _, err := srv.Reload(); !errors.Is(err, tlsfiles.ErrFiles) {
		t.Fatalf("Reload of a mismatched pair = %v, want ErrFiles", err)
	}
	again, err := tls.Dial("tcp", addr, client.ClientConfig(identity.Policy{}))
	if err != nil {
		t.Fatalf("after a bad reload: %v", err)
	}
	defer again.Close()
	if serial(again) != rotated {
		t.Fatal("a bad reload replaced the certificate in force")
	}
	if n := metricValue(t, reg, "portico_test_tls_reloads_total", "error"); n != 1 {
		t.Errorf("reload errors = %v, want 1", n)
	}
	exp := metricValue(t, reg, "portico_test_tls_certificate_expiry_timestamp_seconds", "workload")
	if d := time.Until(time.Unix(int64(exp), 0)); d < 23*time.Hour || d > 25*time.Hour {
		t.Errorf("expiry metric says %v from now, want about a day", d)
	}
}

// metricValue returns the gathered value of metric name whose one label is
// label.
func metricValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == name && m.GetLabel()[0].GetValue() == label {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("metric %s{%s} not found", name, label)
	return 0
}

func TestRunPicksUpRewrittenFiles(t *testing.T) {
	p := tlstest.New(t)
	cfg := p.Files(t, identity.KVNode, "kv-0")
	cfg.Interval = 10 * time.Millisecond
	reloaded := make(chan string, 10)
	cfg.OnReload = func(leaf *x509.Certificate) { reloaded <- leaf.SerialNumber.String() }
	f, err := tlsfiles.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	<-reloaded // the first load
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	p.Reissue(t, cfg, identity.KVNode, "kv-0")
	c, err := tls.X509KeyPair(mustRead(t, cfg.CertFile), mustRead(t, cfg.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-reloaded:
		if want := c.Leaf.SerialNumber.String(); got != want {
			t.Fatalf("reloaded serial %s, want %s", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not pick up the rewritten files")
	}
	cur, _ := f.ClientConfig(identity.Policy{}).GetClientCertificate(nil)
	if !cur.Leaf.Equal(c.Leaf) {
		t.Fatal("the client certificate in force is not the rewritten one")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLoadRefusesUnusableFiles(t *testing.T) {
	p := tlstest.New(t)
	good := p.Files(t, identity.Worker, "w")
	other := tlstest.New(t)
	for _, tc := range []struct {
		name string
		cfg  func() tlsfiles.Config
		want error
	}{
		{"no files", func() tlsfiles.Config { return tlsfiles.Config{} }, tlsfiles.ErrConfig},
		{"missing CA", func() tlsfiles.Config { c := good; c.CAFile += ".nope"; return c }, os.ErrNotExist},
		{"another CA's bundle", func() tlsfiles.Config { c := good; c.CAFile = other.CAFile(); return c }, tlsfiles.ErrFiles},
		{"another trust domain", func() tlsfiles.Config { c := good; c.TrustDomain = "elsewhere.test"; return c }, identity.ErrForbidden},
		{"a key that is not the certificate's", func() tlsfiles.Config {
			c := good
			c.KeyFile = p.Files(t, identity.Worker, "w2").KeyFile
			return c
		}, tlsfiles.ErrFiles},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tlsfiles.Load(tc.cfg())
			if !errors.Is(err, tc.want) {
				t.Fatalf("Load = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestLoadOrPlaintext(t *testing.T) {
	if f, err := tlsfiles.LoadOrPlaintext(tlsfiles.Config{}, false, "x"); f != nil || !errors.Is(err, tlsfiles.ErrNoFiles) {
		t.Fatalf("no files, plaintext not asked for: %v, %v", f, err)
	}
	if f, err := tlsfiles.LoadOrPlaintext(tlsfiles.Config{}, true, "x"); f != nil || err != nil {
		t.Fatalf("plaintext asked for: %v, %v", f, err)
	}
	p := tlstest.New(t)
	if f, err := tlsfiles.LoadOrPlaintext(p.Files(t, identity.Worker, "w"), true, "x"); f == nil || err != nil {
		t.Fatalf("files win over the plaintext flag: %v, %v", f, err)
	}
}
