package porticoctl

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/portico-io/portico/controlplane/porticoctl/kubesecret/kubesecrettest"
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
	} {
		t.Setenv("KUBERNETES_SERVICE_HOST", "")
		if out, err := run(t, append([]string{"certs", "k8s-sync"}, bad...)...); err == nil {
			t.Errorf("%q accepted: %s", bad, out)
		}
	}
}
