package charttest

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/portico-io/portico/controlplane/spec"
)

// renderNotes renders NOTES.txt (the named template portico.notes) through
// a copy of the chart with one extra template, since `helm template` does
// not print NOTES.
func renderNotes(t *testing.T, valueFiles []string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "portico")
	if err := os.CopyFS(dir, os.DirFS(chartDir(t))); err != nil {
		t.Fatal(err)
	}
	notes := "notes: {{ include \"portico.notes\" . | toJson }}\n"
	if err := os.WriteFile(filepath.Join(dir, "templates", "zz-notes-test.yaml"), []byte(notes), 0o644); err != nil {
		t.Fatal(err)
	}
	out := render(t, dir, valueFiles, "--show-only", "templates/zz-notes-test.yaml")
	var doc struct {
		Notes string `json:"notes"`
	}
	if err := yaml.Unmarshal(out, &doc); err != nil || doc.Notes == "" {
		t.Fatalf("rendered notes: %v\n%s", err, out)
	}
	return doc.Notes
}

var curlBody = regexp.MustCompile(`curl -s \$TLS -H "Authorization: Bearer \$TOKEN" -X POST \$ADMIN(/admin/v1/[a-z-]+) -H 'Idempotency-Key: [^']+' \\\s*-d '([^']*)'`)

// TestNotesTellHowToPushTheFirstRouteAndSendTraffic checks that NOTES.txt
// reaches the admin API through a port-forward and that its curl bodies
// have ARCHITECTURE.md's shapes, a route to the cluster it creates, and a
// request on that route through Envoy.
func TestNotesTellHowToPushTheFirstRouteAndSendTraffic(t *testing.T) {
	t.Parallel()
	// The notes template must be what NOTES.txt prints.
	raw, err := os.ReadFile(filepath.Join(chartDir(t), "templates", "NOTES.txt"))
	if err != nil || !strings.Contains(string(raw), `include "portico.notes" .`) {
		t.Fatalf("NOTES.txt must print the portico.notes template (%v)", err)
	}
	for name, files := range map[string][]string{"default": nil, "all-enabled": {allEnabledValues(t)}} {
		t.Run(name, func(t *testing.T) {
			notes := renderNotes(t, files)
			for _, want := range []string{
				"port-forward svc/" + fullName("controlplane") + " 18080:18080",
				"port-forward svc/" + fullName("envoy") + " 10000:",
				"/admin/v1/nodes",
				// The admin API is HTTPS: verified with the release's CA,
				// for the Service name its certificate carries.
				"get secret " + fullName("tls-controlplane") + " -o jsonpath='{.data.ca\\.crt}'",
				"ADMIN=https://" + fullName("controlplane") + "." + namespace + ".svc:18080",
				`TLS="--cacert portico-ca.crt --resolve ` + fullName("controlplane") + "." + namespace + `.svc:18080:127.0.0.1"`,
				// Every call needs a credential: the bootstrap admin token
				// the control plane mounts, and how to move off it.
				"TOKEN=$(kubectl -n " + namespace + " get secret " + fullName("tls-admin-token") + ` -o jsonpath='{.data.token}' | base64 -d)`,
				"POST $ADMIN/admin/v1/tokens",
				"DELETE $ADMIN/admin/v1/tokens/",
			} {
				if !strings.Contains(notes, want) {
					t.Errorf("NOTES lack %q", want)
				}
			}
			if strings.Contains(notes, "localhost:18080/") || strings.Contains(notes, "http://localhost:18080") {
				t.Error("NOTES call the admin API over plaintext; it speaks TLS")
			}
			for _, line := range strings.Split(notes, "\n") {
				if strings.Contains(line, "curl") && strings.Contains(line, "$ADMIN") && !strings.Contains(line, `-H "Authorization: Bearer $TOKEN"`) {
					t.Errorf("NOTES call the admin API without the token (it answers 401): %s", line)
				}
			}
			if warned := strings.Contains(notes, "WARNING: no database"); warned != (name == "default") {
				t.Errorf("database warning shown = %v for %s values", warned, name)
			}
			if name == "all-enabled" && !strings.Contains(notes, "nodePort") {
				t.Error("NodePort Service: NOTES must tell how to find the node port")
			}

			// The bodies go through the admin API's own strict decoding and
			// validation (spec.Decode), kind = the path's last segment.
			var cluster *spec.Cluster
			var route *spec.Route
			for _, m := range curlBody.FindAllStringSubmatch(notes, -1) {
				r, err := spec.Decode(spec.Kind(path.Base(m[1])), []byte(m[2]))
				if err != nil {
					t.Errorf("POST %s body %s: %v", m[1], m[2], err)
					continue
				}
				switch v := r.(type) {
				case *spec.Cluster:
					cluster = v
				case *spec.Route:
					route = v
				}
			}
			if cluster == nil || route == nil {
				t.Fatalf("NOTES need a curl POST (with an Idempotency-Key) of a valid cluster and route; got cluster %v, route %v", cluster, route)
			}
			if route.Cluster != cluster.Name || route.Match.PathPrefix == "" {
				t.Errorf("route %+v must send a path prefix to cluster %q", route, cluster.Name)
			}
			if !strings.Contains(notes, "curl -i localhost:10000"+route.Match.PathPrefix) {
				t.Errorf("NOTES send no request to %s through Envoy", route.Match.PathPrefix)
			}
			if len(cluster.Endpoints) != 1 || !strings.HasSuffix(cluster.Endpoints[0].Address, "."+namespace+".svc."+clusterDomain) {
				t.Errorf("demo upstream %+v is not one Service of the release namespace", cluster.Endpoints)
			}
		})
	}
}
