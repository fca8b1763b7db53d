package e2e_test

// What this file proves (issue 18): the control plane and the scheduler run
// against a Postgres that only accepts TLS with verified certificates on
// both sides, configured by nothing but the standard libpq URL —
// sslmode=verify-full, sslrootcert, sslcert, sslkey — which pgx parses; no
// Portico flag is involved. The server (testdeps.PostgresTLS) has a single
// pg_hba line, hostssl with clientcert=verify-ca, so every connection that
// works here was encrypted and presented a client certificate of the CA.
// The refusals show that the URL's settings are enforced, not decorative:
// plaintext, an untrusted server CA, a host name the server certificate does
// not carry, no client certificate and a client certificate of another CA
// each fail.

import (
	"context"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/pki"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlsfiles"
	"github.com/portico-io/portico/internal/tlstest"
	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/store"
)

func TestPostgresVerifyFull(t *testing.T) {
	p := tlstest.New(t)
	// The server's certificate names localhost only (no IP SAN), so that
	// verify-full to 127.0.0.1 must fail on the host name.
	srvCrt, srvKey, err := p.CA.Issue(pki.Request{Role: identity.KVNode, Name: "postgres", DNSNames: []string{"localhost"}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, port, err := net.SplitHostPort(testdeps.PostgresTLS(t, p.CA.CertPEM, srvCrt, srvKey))
	if err != nil {
		t.Fatal(err)
	}
	cpFiles := p.Files(t, identity.ControlPlane, "controlplane")
	schedFiles := p.Files(t, identity.Scheduler, "scheduler")

	// pgURL is the libpq URL a deployment would configure; empty values
	// are left out.
	pgURL := func(host, db, sslmode, rootCert string, client tlsfiles.Config) string {
		q := url.Values{"sslmode": {sslmode}, "connect_timeout": {"5"}}
		for k, v := range map[string]string{"sslrootcert": rootCert, "sslcert": client.CertFile, "sslkey": client.KeyFile} {
			if v != "" {
				q.Set(k, v)
			}
		}
		u := url.URL{Scheme: "postgres", User: url.User("postgres"), Host: net.JoinHostPort(host, port), Path: "/" + db, RawQuery: q.Encode()}
		return u.String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	admin, err := pgx.Connect(ctx, pgURL("localhost", "postgres", "verify-full", p.CAFile(), cpFiles))
	if err != nil {
		t.Fatalf("verify-full with the controlplane certificate: %v", err)
	}
	defer admin.Close(context.Background())
	for _, db := range []string{"cp", "sched"} {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("controlplane", func(t *testing.T) {
		cp := startControlPlane(t, pgURL("localhost", "cp", "verify-full", p.CAFile(), cpFiles), controlplane.Config{})
		a := newAdminAPI(t, cp.Admin)
		a.create("clusters", map[string]any{"name": "echo", "endpoints": []any{map[string]any{"address": "127.0.0.1", "port": 18900}}}, nil)
		// Its connections are the TLS ones with its certificate: the server
		// admits no other kind, this says they are the control plane's.
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
			WHERE a.datname = 'cp' AND s.ssl AND s.client_dn LIKE '%CN=controlplane%'`).Scan(&n)
		if err != nil || n == 0 {
			t.Fatalf("TLS connections of the control plane to database cp: %d, %v", n, err)
		}
	})

	t.Run("scheduler", func(t *testing.T) {
		st, err := store.Open(ctx, store.Config{DatabaseURL: pgURL("localhost", "sched", "verify-full", p.CAFile(), schedFiles), MaxConns: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		spec, err := jobspec.Decode(strings.NewReader(`{"tenant":"t","schedule":{"type":"FIXED_RATE","every":"PT1H","anchor":"2026-01-01T00:00:00Z"},
			"target":{"type":"HTTP","http":{"url":"http://127.0.0.1:9/"}}}`))
		if err != nil {
			t.Fatal(err)
		}
		if err := spec.Normalize(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		job, _, err := st.CreateJob(ctx, spec, "k", "h")
		if err != nil {
			t.Fatal(err)
		}
		got, err := st.GetJob(ctx, job.ID)
		if err != nil || got.Spec.Tenant != "t" {
			t.Fatalf("GetJob(%d): %+v, %v", job.ID, got, err)
		}
		run, err := st.Trigger(ctx, job.ID)
		if err != nil || run.ScheduleID != job.ID || !run.Manual {
			t.Fatalf("Trigger(%d): %+v, %v", job.ID, run, err)
		}
	})

	// verify-ca skips only the host-name check: it reaching 127.0.0.1 shows
	// that the verify-full refusal below is that check and nothing else.
	t.Run("verify-ca to 127.0.0.1 works", func(t *testing.T) {
		c, err := pgx.Connect(ctx, pgURL("127.0.0.1", "postgres", "verify-ca", p.CAFile(), cpFiles))
		if err != nil {
			t.Fatal(err)
		}
		c.Close(context.Background())
	})

	other := tlstest.New(t)
	otherClient := other.Files(t, identity.ControlPlane, "controlplane")
	for _, tc := range []struct {
		name, url, want string
	}{
		{"plaintext", pgURL("localhost", "postgres", "disable", "", tlsfiles.Config{}), "no encryption"},
		{"server certificate from another CA", pgURL("localhost", "postgres", "verify-full", other.CAFile(), cpFiles), "unknown authority"},
		{"host name not in the server certificate", pgURL("127.0.0.1", "postgres", "verify-full", p.CAFile(), cpFiles), "IP SANs"},
		{"no client certificate", pgURL("localhost", "postgres", "verify-full", p.CAFile(), tlsfiles.Config{}), "requires a valid client certificate"},
		// TLS 1.3: the client's handshake is over before the server checks
		// its certificate, so the server's alert can lose the race with the
		// client's first write, which then meets the reset instead.
		{"client certificate from another CA", pgURL("localhost", "postgres", "verify-full", p.CAFile(), otherClient), "unknown certificate authority|connection reset by peer"},
	} {
		t.Run("refused/"+tc.name, func(t *testing.T) {
			c, err := pgx.Connect(ctx, tc.url)
			if err == nil {
				c.Close(context.Background())
				t.Fatal("connected")
			}
			if !slices.ContainsFunc(strings.Split(tc.want, "|"), func(w string) bool { return strings.Contains(err.Error(), w) }) {
				t.Fatalf("want an error about %q, got %v", tc.want, err)
			}
			t.Log(err)
		})
	}
}
