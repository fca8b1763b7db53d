package porticoctl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/adminclient"
	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/controlplane/cptest"
	"github.com/portico-io/portico/controlplane/pkitest"
	"github.com/portico-io/portico/controlplane/porticoctl"
	"github.com/portico-io/portico/controlplane/store"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlstest"
)

// cp is a control plane on its own database, served over TLS, and the
// porticoctl flags that reach it.
type cp struct {
	t     *testing.T
	flags []string
	cl    *adminclient.Client
	db    string
}

func startCP(t *testing.T) *cp {
	t.Helper()
	p := tlstest.New(t)
	db := testdeps.Postgres(t)
	in := cptest.Start(t, controlplane.Config{DatabaseURL: db, TLS: p.Files(t, identity.ControlPlane, "cp")})
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(in.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	server := "https://localhost" + in.Addrs.Admin[strings.LastIndex(in.Addrs.Admin, ":"):]
	cl, err := adminclient.New(adminclient.Config{Server: server, Token: in.Token, CAFile: p.CAFile()})
	if err != nil {
		t.Fatal(err)
	}
	return &cp{t: t, cl: cl, db: db, flags: []string{"--server", server, "--token-file", tokFile, "--cacert", p.CAFile()}}
}

// run runs porticoctl against the control plane and returns its output.
func (c *cp) run(args ...string) (string, error) {
	c.t.Helper()
	var out bytes.Buffer
	root := porticoctl.Root(&out)
	root.SetErr(&out)
	all := slices.Clone(args)
	for i := 0; i+1 < len(c.flags); i += 2 {
		if !slices.Contains(args, c.flags[i]) { // a test's own flag wins
			all = append(all, c.flags[i], c.flags[i+1])
		}
	}
	root.SetArgs(all)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

func (c *cp) mustRun(args ...string) string {
	c.t.Helper()
	out, err := c.run(args...)
	if err != nil {
		c.t.Fatalf("porticoctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// snapshot compiles the head config straight from the database.
func (c *cp) snapshot() *compile.Snapshot {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Config{DatabaseURL: c.db})
	if err != nil {
		c.t.Fatal(err)
	}
	defer st.Close()
	cfg, err := st.ConfigAt(ctx, c.head())
	if err != nil {
		c.t.Fatal(err)
	}
	snap, err := compile.Compile(cfg, compile.Options{})
	if err != nil {
		c.t.Fatal(err)
	}
	return snap
}

func (c *cp) head() int64 {
	c.t.Helper()
	h, err := c.cl.Head(context.Background())
	if err != nil {
		c.t.Fatal(err)
	}
	return h
}

// writeFiles writes name → content into a new directory.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const (
	clustersYAML = `kind: clusters
name: echo
endpoints:
- address: 127.0.0.1
  port: 18900
---
kind: cluster
name: extra
endpoints: [{address: 127.0.0.1, port: 18901}]
`
	routesYAML = `kind: routes
name: echo
match: {pathPrefix: /echo}
cluster: echo
auth: {mode: jwt, provider: idp, requiredScopes: ["echo:read"]}
---
kind: route
name: extra
match: {pathPrefix: /extra}
cluster: extra
`
	miscYAML = `kind: consumers
name: acme
tenant: acme
tier: pro
---
kind: ratelimit-rules
name: per-consumer
domain: portico
descriptors: [{key: consumer}]
limit: 5
window: 1s
burst: 5
---
kind: jwt-providers
name: idp
issuer: https://idp.test
audiences: [portico]
jwksUri: https://idp.test/jwks.json
algorithms: [RS256, ES256]
---
kind: revocations
jti: stolen-1
expiresAt: "2030-01-01T00:00:00Z"
`
)

func configDir(t *testing.T) string {
	ca := pkitest.NewCA(t, "upstream-ca").CertPEM
	secret := "kind: secrets\nname: upstream-ca\ntype: ca\nca: |\n  " + strings.ReplaceAll(strings.TrimSpace(ca), "\n", "\n  ") + "\n"
	return writeFiles(t, map[string]string{"clusters.yaml": clustersYAML, "routes.yaml": routesYAML, "misc.yml": miscYAML,
		"secrets.yaml": secret, "README.md": "not a manifest"})
}

// A dry run shows the diff and changes nothing; the apply of a directory
// of several kinds lands in one version; the same files again make no
// version.
func TestApplyDryRunOneVersionIdempotent(t *testing.T) {
	c := startCP(t)
	dir := configDir(t)

	out := c.mustRun("apply", "-f", dir, "--dry-run")
	for _, want := range []string{"+ clusters/echo (create)", "+ routes/echo (create)", "+ secrets/upstream-ca (create)",
		"+ revocations/stolen-1 (create)", "+     port: 18900", "9 to create", "nothing was changed"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out)
		}
	}
	if h := c.head(); h != 0 {
		t.Fatalf("dry run made version %d", h)
	}

	out = c.mustRun("apply", "-f", dir)
	if !strings.Contains(out, "applied as version 1: 9 created") || c.head() != 1 {
		t.Fatalf("apply (head %d):\n%s", c.head(), out)
	}
	out = c.mustRun("apply", "-f", dir)
	if !strings.Contains(out, "unchanged") || c.head() != 1 {
		t.Fatalf("second apply (head %d):\n%s", c.head(), out)
	}

	// A change and a prune: one more version, with a readable diff.
	edited := writeFiles(t, map[string]string{"clusters.yaml": strings.Replace(clustersYAML, "18900", "18902", 1) +
		"", "routes.yaml": strings.SplitN(routesYAML, "---", 2)[0]})
	out = c.mustRun("apply", "-f", filepath.Join(edited, "clusters.yaml"), "-f", filepath.Join(edited, "routes.yaml"), "--prune", "--dry-run")
	for _, want := range []string{"~ clusters/echo (update)", "-     port: 18900", "+     port: 18902", "- routes/extra (delete)",
		"0 to create, 1 to update, 1 to delete, 2 unchanged"} {
		if !strings.Contains(out, want) {
			t.Errorf("prune dry run lacks %q:\n%s", want, out)
		}
	}
	out = c.mustRun("apply", "-f", edited, "--prune")
	if !strings.Contains(out, "applied as version 2: 0 created, 1 updated, 1 deleted") || c.head() != 2 {
		t.Fatalf("apply with prune (head %d):\n%s", c.head(), out)
	}

	// get, in each output.
	lines := strings.Split(strings.TrimSpace(c.mustRun("get", "routes")), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME MATCH CLUSTER AUTH" ||
		strings.Join(strings.Fields(lines[1]), " ") != "echo /echo echo jwt" {
		t.Fatalf("get routes:\n%s", strings.Join(lines, "\n"))
	}
	var cl map[string]any
	if err := json.Unmarshal([]byte(c.mustRun("get", "cluster", "echo", "-o", "json")), &cl); err != nil || cl["name"] != "echo" {
		t.Fatalf("get -o json: %v %v", cl, err)
	}
	if out := c.mustRun("get", "secrets", "-o", "yaml"); !strings.Contains(out, "kind: secrets\nname: upstream-ca\n") || strings.Contains(out, "PRIVATE") {
		t.Fatalf("get secrets -o yaml:\n%s", out)
	}
}

// A bad resource in a batch is refused naming kind, name and field, and
// nothing of the batch is stored.
func TestApplyBadResourceChangesNothing(t *testing.T) {
	c := startCP(t)
	dir := writeFiles(t, map[string]string{"a.yaml": clustersYAML + "---\nkind: clusters\nname: bad\nendpoints: [{address: 127.0.0.1, port: 0}]\n"})
	out, err := c.run("apply", "-f", dir)
	if err == nil || !strings.Contains(err.Error(), "422") || !strings.Contains(err.Error(), "clusters/bad: endpoints[0].port") {
		t.Fatalf("bad batch: %v\n%s", err, out)
	}
	if _, err := c.run("apply", "-f", writeFiles(t, map[string]string{"r.yaml": routesYAML})); err == nil ||
		!strings.Contains(err.Error(), "unknown_reference") {
		t.Fatalf("dangling references: %v", err)
	}
	if h := c.head(); h != 0 {
		t.Fatalf("refused batches made version %d", h)
	}
}

// The endpoint refuses a token it does not know (401) and a token whose
// role lacks security.write for a batch with security kinds (403).
func TestApplyRefusesUnauthorizedTokens(t *testing.T) {
	c := startCP(t)
	dir := configDir(t)
	bad := filepath.Join(t.TempDir(), "bad-token")
	if err := os.WriteFile(bad, []byte("ptk_notatoken"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := c.run("apply", "-f", dir, "--token-file", bad); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("unknown token: %v\n%s", err, out)
	}
	raw, err := c.cl.Post(context.Background(), "/tokens", map[string]any{"name": "ci", "roles": []string{"editor"}})
	if err != nil {
		t.Fatal(err)
	}
	var tok struct {
		Token string `json:"token"`
	}
	_ = json.Unmarshal(raw, &tok)
	editor := filepath.Join(t.TempDir(), "editor-token")
	if err := os.WriteFile(editor, []byte(tok.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := c.run("apply", "-f", dir, "--token-file", editor); err == nil || !strings.Contains(err.Error(), "403") ||
		!strings.Contains(err.Error(), "security.write") {
		t.Fatalf("editor with security kinds: %v\n%s", err, out)
	}
	if h := c.head(); h != 0 {
		t.Fatalf("refused batches made version %d", h)
	}
	// Without security kinds the editor may apply.
	c.mustRun("apply", "-f", filepath.Join(dir, "clusters.yaml"), "--token-file", editor)
}

// Export then apply into an empty database reproduces the same config
// (the whole config view of the head, every kind) and the same compiled
// snapshot (every resource's content hash), and exporting both gives the
// same files byte for byte.
func TestExportApplyReproducesConfig(t *testing.T) {
	src := startCP(t)
	src.mustRun("apply", "-f", configDir(t))
	src.mustRun("delete", "route", "extra")
	src.mustRun("apply", "-f", writeFiles(t, map[string]string{"c.yaml": strings.Replace(clustersYAML, "18901", "18903", 1)}))
	if src.head() != 3 {
		t.Fatalf("source head %d", src.head())
	}
	out := filepath.Join(t.TempDir(), "export")
	src.mustRun("export", "-d", out)
	files, _ := filepath.Glob(filepath.Join(out, "*.yaml"))
	if len(files) != 7 {
		t.Fatalf("export wrote %v", files)
	}

	dst := startCP(t)
	if got := dst.mustRun("apply", "-f", out); !strings.Contains(got, "applied as version 1: 8 created") {
		t.Fatalf("apply of the export:\n%s", got)
	}
	a, _, err := src.cl.Config(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := dst.cl.Config(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Fatalf("configs differ:\nsource %s\ncopy   %s", ja, jb)
	}
	// The compiled snapshots hold the same resources: same content hashes.
	sa, sb := src.snapshot(), dst.snapshot()
	for _, typ := range []string{compile.ClusterType, compile.EndpointType, compile.ListenerType, compile.RouteType,
		compile.SecretType, compile.JwtProviderType, compile.ApiKeyShardType, compile.RevocationListType,
		compile.RateLimitConfigType, compile.RateLimitRuleType} {
		if !maps.Equal(sa.GetVersionMap(typ), sb.GetVersionMap(typ)) {
			t.Errorf("%s hashes differ:\nsource %v\ncopy   %v", typ, sa.GetVersionMap(typ), sb.GetVersionMap(typ))
		}
	}
	if len(sa.GetVersionMap(compile.ClusterType)) == 0 || len(sa.GetVersionMap(compile.RevocationListType)) == 0 {
		t.Fatal("the snapshots hold no clusters or revocations")
	}
	again := filepath.Join(t.TempDir(), "again")
	dst.mustRun("export", "-d", again)
	for _, f := range files {
		x, _ := os.ReadFile(f)
		y, err := os.ReadFile(filepath.Join(again, filepath.Base(f)))
		if err != nil || !bytes.Equal(x, y) {
			t.Fatalf("%s differs after the round trip:\n%s\n---\n%s", filepath.Base(f), x, y)
		}
	}
	// And the export applies back to its source as a no-op.
	if got := src.mustRun("apply", "-f", out, "--prune"); !strings.Contains(got, "unchanged") {
		t.Fatalf("export applied to its source:\n%s", got)
	}
}

// versions, rollback, nodes and rollouts speak their endpoints.
func TestOperationsCommands(t *testing.T) {
	c := startCP(t)
	c.mustRun("apply", "-f", writeFiles(t, map[string]string{"c.yaml": clustersYAML}))
	c.mustRun("delete", "cluster", "extra")
	if out := c.mustRun("versions"); !strings.Contains(out, "VERSION") || !strings.Contains(out, "\n2 ") {
		t.Fatalf("versions:\n%s", out)
	}
	if out := c.mustRun("rollback", "--to", "1"); !strings.Contains(out, "as version 3") {
		t.Fatalf("rollback:\n%s", out)
	}
	if out := c.mustRun("get", "clusters"); !strings.Contains(out, "extra") {
		t.Fatalf("rollback did not restore the cluster:\n%s", out)
	}
	if out := c.mustRun("nodes"); !strings.HasPrefix(out, "ID") {
		t.Fatalf("nodes:\n%s", out)
	}
	if out := c.mustRun("rollouts", "list"); !strings.HasPrefix(out, "ID") {
		t.Fatalf("rollouts:\n%s", out)
	}
	if _, err := c.run("rollouts", "get", "99"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("rollouts get 99: %v", err)
	}
	if _, err := c.run("delete", "cluster", "nope"); !adminclient.IsNotFound(err) {
		t.Fatalf("delete missing: %v", err)
	}
}
