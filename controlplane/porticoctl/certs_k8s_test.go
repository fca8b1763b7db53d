package porticoctl

import (
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/portico-io/portico/controlplane/porticoctl/kubesecret/kubesecrettest"
	"github.com/portico-io/portico/internal/authn"
)

// TestCertsK8sSync runs the command as the chart's Job does, in a "pod"
// whose service account directory and KUBERNETES_SERVICE_* point at
// kubesecrettest (a stand-in that checks our requests; not Kubernetes),
// with a Role allowing create and get/update on the named Secrets only.
func TestCertsK8sSync(t *testing.T) {
	srv := kubesecrettest.New(t, "portico", "sa-token")
	names := []string{"rel-tls-ca", "rel-tls-envoy", "rel-tls-kvnode"}
	srv.Allowed = func(verb, name string) bool { return verb == "create" || slices.Contains(names, name) }
	host, port := srv.HostPort()
	t.Setenv("KUBERNETES_SERVICE_HOST", host)
	t.Setenv("KUBERNETES_SERVICE_PORT", port)
	args := []string{"certs", "k8s-sync", "--service-account-dir", srv.ServiceAccountDir(t),
		"--secret-prefix", "rel-tls-", "--trust-domain", "example.test",
		"--workloads", "gateway:envoy,kvnode:kvnode",
		"--dns", "kvnode=*.rel-kvnode-headless.portico.svc,rel-kvnode.portico.svc",
		"--validity", "48h", "--label", "app.kubernetes.io/instance=rel"}
	out, err := run(t, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{
		"created portico/rel-tls-ca (spiffe://example.test,",
		"created portico/rel-tls-envoy (spiffe://example.test/gateway/envoy,",
		"created portico/rel-tls-kvnode (spiffe://example.test/kvnode/kvnode,",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "PRIVATE KEY") {
		t.Error("the output shows key material")
	}
	s, _ := srv.Secret("rel-tls-kvnode")
	if s.Metadata.Labels["app.kubernetes.io/instance"] != "rel" || s.Metadata.Labels["app.kubernetes.io/managed-by"] != "porticoctl" {
		t.Errorf("labels %v", s.Metadata.Labels)
	}
	srv.Requests()

	// Again: everything kept, nothing written.
	out, err = run(t, args...)
	if err != nil || strings.Count(out, "kept ") != 3 {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	for _, r := range srv.Requests() {
		if r.Method != http.MethodGet {
			t.Errorf("second run wrote: %s %s", r.Method, r.Path)
		}
	}
}

func TestCertsK8sSyncRefusesBadFlags(t *testing.T) {
	for _, bad := range [][]string{
		{"--secret-prefix", "p-", "--workloads", "gateway"},
		{"--secret-prefix", "p-", "--workloads", "root:x"},
		{"--secret-prefix", "p-", "--workloads", "gateway:g", "--dns", "other=a.b"},
		{"--secret-prefix", "p-", "--workloads", "gateway:g", "--dns", "g"},
		{"--workloads", "gateway:g"},
		{"--secret-prefix", "p-"},
		{},
		{"--secret-prefix", "p-", "--admin-token-secret", "t"},
		{"--secret-prefix", "p-", "--workloads", "gateway:g", "--admin-token-secret", "p-ca"},
		{"--secret-prefix", "p-", "--workloads", "gateway:g", "--admin-token-secret", "p-g"},
	} {
		t.Setenv("KUBERNETES_SERVICE_HOST", "")
		// Refused by the flag checks, before looking for a cluster.
		if out, err := run(t, append([]string{"certs", "k8s-sync"}, bad...)...); err == nil || strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
			t.Errorf("%q: %v, want a flag error: %s", bad, err, out)
		}
	}
}

// TestCertsK8sSyncAdminToken: --admin-token-secret beside the certificates
// creates the token Secret once (its id, never the token, in the output),
// and alone keeps only that Secret.
func TestCertsK8sSyncAdminToken(t *testing.T) {
	srv := kubesecrettest.New(t, "portico", "sa-token")
	names := []string{"rel-tls-ca", "rel-tls-envoy", "rel-tls-admin-token"}
	srv.Allowed = func(verb, name string) bool { return verb == "create" || slices.Contains(names, name) }
	host, port := srv.HostPort()
	t.Setenv("KUBERNETES_SERVICE_HOST", host)
	t.Setenv("KUBERNETES_SERVICE_PORT", port)
	sa := srv.ServiceAccountDir(t)
	out, err := run(t, "certs", "k8s-sync", "--service-account-dir", sa, "--secret-prefix", "rel-tls-",
		"--workloads", "gateway:envoy", "--admin-token-secret", "rel-tls-admin-token")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s, ok := srv.Secret("rel-tls-admin-token")
	if !ok {
		t.Fatalf("no token Secret:\n%s", out)
	}
	id, err := authn.ParseTokenID(string(s.Data["token"]))
	if err != nil {
		t.Fatal(err)
	}
	if want := "created portico/rel-tls-admin-token (token " + id + "): no Secret"; !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	if regexp.MustCompile(`ptk_[0-9a-f]{16}_`).MatchString(out) {
		t.Errorf("the output shows the token:\n%s", out)
	}

	// The token alone: no certificate Secret is read.
	srv.Requests()
	out, err = run(t, "certs", "k8s-sync", "--service-account-dir", sa, "--admin-token-secret", "rel-tls-admin-token")
	if err != nil || strings.TrimSpace(out) != "kept portico/rel-tls-admin-token (token "+id+")" {
		t.Fatalf("token only: %v\n%s", err, out)
	}
	for _, r := range srv.Requests() {
		if r.Method != http.MethodGet || r.Name != "rel-tls-admin-token" {
			t.Errorf("token only: %s %s", r.Method, r.Path)
		}
	}
}
