package launcher

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/pki"
	"github.com/portico-io/portico/internal/tlsfiles"
)

// make run's PKI: made on the first run, left alone on the next, renewed
// when due, and every file loads as the identity its process needs.
func TestEnsurePKI(t *testing.T) {
	root := t.TempDir()
	now := time.Now()
	var out bytes.Buffer
	if err := EnsurePKI(root, &out, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "created the platform CA") {
		t.Fatalf("first run said %q", out.String())
	}
	for _, w := range workloads() {
		args := TLSArgs(root, w.File)
		cfg := tlsfiles.Config{
			CertFile: strings.TrimPrefix(args[0], "--tls-cert-file="),
			KeyFile:  strings.TrimPrefix(args[1], "--tls-key-file="),
			CAFile:   strings.TrimPrefix(args[2], "--tls-ca-file="),
		}
		f, err := tlsfiles.Load(cfg)
		if err != nil {
			t.Fatalf("%s: %v", w.File, err)
		}
		if id := f.ID(); id.Role != w.Role || id.Name != w.Name {
			t.Errorf("%s holds %s", w.File, id)
		}
		if st, _ := os.Stat(cfg.KeyFile); st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v", cfg.KeyFile, st.Mode().Perm())
		}
	}
	cert := filepath.Join(PKIDir(root), "controlplane.crt")
	before, _ := os.ReadFile(cert)
	caBefore, _ := os.ReadFile(filepath.Join(PKIDir(root), pki.CACertFile))

	out.Reset()
	if err := EnsurePKI(root, &out, now.Add(time.Hour)); err != nil || out.Len() != 0 {
		t.Fatalf("second run: %v, said %q", err, out.String())
	}
	if after, _ := os.ReadFile(cert); !bytes.Equal(before, after) {
		t.Fatal("a fresh certificate was rewritten")
	}
	if err := EnsurePKI(root, &out, now.Add(20*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(cert); bytes.Equal(before, after) {
		t.Fatal("a certificate with 4 of 24 hours left was not renewed")
	}
	if caAfter, _ := os.ReadFile(filepath.Join(PKIDir(root), pki.CACertFile)); !bytes.Equal(caBefore, caAfter) {
		t.Fatal("the CA changed: every certificate it issued would stop verifying")
	}
}
