package porticoctl

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlsfiles"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := Root(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestCertsInitIssueRenew(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if out, err := run(t, "certs", "init", "--dir", dir, "--trust-domain", "example.test"); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	if _, err := run(t, "certs", "init", "--dir", dir); err == nil {
		t.Fatal("a second init replaced the CA")
	}
	if out, err := run(t, "certs", "issue", "--dir", dir, "--role", "ratelimit", "--name", "rl-0", "--ip", "127.0.0.1"); err != nil ||
		!strings.Contains(out, "spiffe://example.test/ratelimit/rl-0") {
		t.Fatalf("issue: %v\n%s", err, out)
	}
	for _, bad := range [][]string{
		{"--role", "root", "--name", "x"},
		{"--role", "gateway", "--name", "a/b"},
		{"--role", "gateway"},
		{"--role", "gateway", "--name", "x", "--ip", "localhost"},
	} {
		if out, err := run(t, append([]string{"certs", "issue", "--dir", dir}, bad...)...); err == nil {
			t.Errorf("issue %q succeeded: %s", bad, out)
		}
	}
	cfg := tlsfiles.Config{CertFile: filepath.Join(dir, "rl-0.crt"), KeyFile: filepath.Join(dir, "rl-0.key"),
		CAFile: filepath.Join(dir, "ca.crt"), TrustDomain: "example.test"}
	f, err := tlsfiles.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if f.ID().Role != identity.RateLimit {
		t.Fatalf("loaded identity %s", f.ID())
	}
	before, _ := os.ReadFile(cfg.CertFile)
	if out, err := run(t, "certs", "renew", "--dir", dir); err != nil || out != "" {
		t.Fatalf("renew of a fresh certificate: %v %q", err, out)
	}
	if out, err := run(t, "certs", "renew", "--dir", dir, "--before", "0.9999"); err != nil || !strings.Contains(out, "renewed") {
		t.Fatalf("renew: %v %q", err, out)
	}
	after, _ := os.ReadFile(cfg.CertFile)
	if bytes.Equal(before, after) {
		t.Fatal("renew did not rewrite the certificate")
	}
	if changed, err := f.Reload(); !changed || err != nil {
		t.Fatalf("the renewed files do not load: %v, %v", changed, err)
	}
}
