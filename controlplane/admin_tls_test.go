package controlplane_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlstest"
)

// With certificate files the admin port speaks only TLS: a TLS client that
// trusts the platform CA is served (a client certificate is optional; the
// bearer token authenticates), a plaintext request gets no admin answer, a
// client certificate from another CA fails the handshake, and without a
// token an operator certificate is an admin's credential while other roles
// get 403.
func TestAdminAPIOverTLS(t *testing.T) {
	p := tlstest.New(t)
	cp := startWith(t, controlplane.Config{AdminAddr: "127.0.0.1:0", XDSAddr: "127.0.0.1:0",
		DatabaseURL: testdeps.Postgres(t), TLS: p.Files(t, identity.ControlPlane, "cp")})
	port := cp.addrs.Admin[strings.LastIndex(cp.addrs.Admin, ":"):]

	resp, err := http.Get("http://127.0.0.1" + port + "/admin/v1/clusters")
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(b), "items") {
			t.Fatalf("plaintext admin request: %d %s", resp.StatusCode, b)
		}
	}
	for _, c := range p.Cases(t, identity.Operator, identity.Worker) {
		t.Run(c.Name, func(t *testing.T) {
			hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: c.Client}}
			req, _ := http.NewRequest(http.MethodGet, "https://localhost"+port+"/admin/v1/clusters", nil)
			req.Header.Set("Authorization", "Bearer "+cp.token)
			resp, err := hc.Do(req)
			refused := c.Name == "another CA" || c.Name == "expired"
			if refused {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("served %d, want a refused handshake", resp.StatusCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"items"`) {
				t.Fatalf("GET clusters over TLS: %d %s", resp.StatusCode, b)
			}
			// Without a token the certificate is the credential: an
			// operator's is an admin's, other roles hold no permission.
			resp2, err := hc.Get("https://localhost" + port + "/admin/v1/clusters")
			if err != nil {
				t.Fatal(err)
			}
			resp2.Body.Close()
			want := map[string]int{"no client certificate": http.StatusUnauthorized, "wrong role worker": http.StatusForbidden, "role operator": http.StatusOK}[c.Name]
			if resp2.StatusCode != want {
				t.Fatalf("certificate only: %d, want %d", resp2.StatusCode, want)
			}
		})
	}
}
