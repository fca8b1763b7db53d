package testdeps

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/pki"
)

// The server answers a client with a certificate from its CA over
// verify-full TLS, and refuses plaintext. e2e/postgres_tls_test.go covers
// the rest of the refusals and the components on top.
func TestPostgresTLS(t *testing.T) {
	ca, err := pki.NewCA(identity.DefaultTrustDomain, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	issue := func(role identity.Role, name string) (crt, key []byte) {
		crt, key, err := ca.Issue(pki.Request{Role: role, Name: name, DNSNames: []string{"localhost"}}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return crt, key
	}
	srvCrt, srvKey := issue(identity.KVNode, "postgres")
	addr := PostgresTLS(t, ca.CertPEM, srvCrt, srvKey)
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	cliCrt, cliKey := issue(identity.ControlPlane, "client")
	if err := pki.WritePair(filepath.Join(dir, "c.crt"), filepath.Join(dir, "c.key"), cliCrt, cliKey); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := "postgres://postgres@localhost:" + port + "/postgres?sslmode=verify-full&sslrootcert=" + filepath.Join(dir, "ca.crt") +
		"&sslcert=" + filepath.Join(dir, "c.crt") + "&sslkey=" + filepath.Join(dir, "c.key")
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("verify-full with a client certificate: %v", err)
	}
	defer c.Close(context.Background())
	var ssl bool
	if err := c.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || !ssl {
		t.Fatalf("pg_stat_ssl: ssl=%v err=%v", ssl, err)
	}

	_, err = pgx.Connect(ctx, "postgres://postgres@127.0.0.1:"+port+"/postgres?sslmode=disable&connect_timeout=5")
	if err == nil || !strings.Contains(err.Error(), "no encryption") {
		t.Fatalf("plaintext: want pg_hba's refusal (no encryption), got %v", err)
	}
}

func TestPostgresTLSWithoutProgramsSkips(t *testing.T) {
	t.Setenv("CI", "")
	t.Setenv("PORTICO_TEST_PG_BINDIR", t.TempDir())
	var skipped bool
	t.Run("inner", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		PostgresTLS(t, nil, nil, nil)
	})
	if !skipped {
		t.Fatal("missing postgres programs outside CI should skip")
	}
}
