package launcher

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/controlplane/seal"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/pki"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlsfiles"
)

func TestSecretKeyIsMadeOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret.key")
	if err := ensureSecretKey(path); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	first, err := seal.ReadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := ensureSecretKey(path); err != nil {
		t.Fatal(err)
	}
	again, err := seal.ReadKeyFile(path)
	if err != nil || string(again) != string(first) {
		t.Fatal("the key changed on the second run")
	}
}

// The demo seed, HTTPS listener and the redis proxy's platform TLS included,
// is accepted over TLS by a real control plane configured as make run
// configures it, and can run twice.
func TestSeedWithDemoHTTPS(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, ".run"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := ensureSecretKey(SecretKeyFile(root)); err != nil {
		t.Fatal(err)
	}
	key, err := seal.ReadKeyFile(SecretKeyFile(root))
	if err != nil {
		t.Fatal(err)
	}
	// The control plane as make run starts it: its certificate from
	// .run/pki, the gateway identity for Envoy's platform calls.
	if err := EnsurePKI(root, io.Discard, time.Now()); err != nil {
		t.Fatal(err)
	}
	dir := PKIDir(root)
	gw := &compile.GatewayIdentity{CertFile: filepath.Join(dir, "gateway.crt"), KeyFile: filepath.Join(dir, "gateway.key"),
		CAFile: filepath.Join(dir, pki.CACertFile), TrustDomain: identity.DefaultTrustDomain}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan controlplane.Addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- controlplane.Run(ctx, controlplane.Config{AdminAddr: "127.0.0.1:0", XDSAddr: "127.0.0.1:0",
			TLS:     tlsfiles.Config{CertFile: filepath.Join(dir, "controlplane.crt"), KeyFile: filepath.Join(dir, "controlplane.key"), CAFile: gw.CAFile},
			Compile: compile.Options{GatewayIdentity: gw}, DatabaseURL: testdeps.Postgres(t), SecretKey: key, Ready: ready})
	}()
	tc, err := OperatorTLS(root)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	defer func() { cancel(); <-done }()
	var addrs controlplane.Addrs
	select {
	case addrs = <-ready:
	case err := <-done:
		t.Fatalf("control plane: %v", err)
	}
	admin := "https://" + addrs.Admin
	for range 2 {
		if err := Seed(ctx, client, admin); err != nil {
			t.Fatal(err)
		}
		if err := SeedTLS(ctx, client, admin, root); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := client.Get(admin + "/admin/v1/secrets/demo-tls")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"hasPrivateKey":true`) || strings.Contains(string(body), "PRIVATE KEY") {
		t.Fatalf("demo secret: %d %s", resp.StatusCode, body)
	}
	if st, err := os.Stat(filepath.Join(demoTLSDir(root), "gateway.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("demo key file: %v %v", st, err)
	}
}
