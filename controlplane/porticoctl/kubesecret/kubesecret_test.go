package kubesecret_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/controlplane/porticoctl/kubesecret"
	"github.com/portico-io/portico/controlplane/porticoctl/kubesecret/kubesecrettest"
	"github.com/portico-io/portico/internal/pki"
)

// These tests check the requests the client sends (methods, paths, bearer
// token, bodies) and how it reads the answers, against kubesecrettest's
// stand-in for the Secret endpoints — not against Kubernetes.

const ns = "portico-test"

func inCluster(t *testing.T, srv *kubesecrettest.Server) *kubesecret.Client {
	t.Helper()
	host, port := srv.HostPort()
	t.Setenv("KUBERNETES_SERVICE_HOST", host)
	t.Setenv("KUBERNETES_SERVICE_PORT", port)
	cfg, err := kubesecret.InCluster(srv.ServiceAccountDir(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Namespace != ns {
		t.Fatalf("namespace from the service account = %q", cfg.Namespace)
	}
	c, err := kubesecret.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestGetCreateUpdate(t *testing.T) {
	srv := kubesecrettest.New(t, ns, "tok-1")
	c := inCluster(t, srv)
	ctx := context.Background()

	if _, err := c.Get(ctx, "portico-tls-ca"); !errors.Is(err, kubesecret.ErrNotFound) {
		t.Fatalf("Get of a missing Secret: %v, want ErrNotFound", err)
	}
	in := &kubesecret.Secret{
		Metadata: kubesecret.Metadata{Name: "portico-tls-ca", Labels: map[string]string{"a": "b"}},
		Type:     kubesecret.TypeTLS,
		Data:     map[string][]byte{"tls.crt": []byte("CERT"), "tls.key": []byte("KEY")},
	}
	created, err := c.Create(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if created.Metadata.ResourceVersion == "" || string(created.Data["tls.key"]) != "KEY" {
		t.Fatalf("created = %+v", created.Metadata)
	}
	if in.Metadata.Namespace != "" || in.APIVersion != "" {
		t.Error("Create changed the caller's Secret")
	}
	if _, err := c.Create(ctx, in); !errors.Is(err, kubesecret.ErrExists) || errors.Is(err, kubesecret.ErrConflict) {
		t.Fatalf("second Create: %v, want ErrExists only", err)
	}
	got, err := c.Get(ctx, "portico-tls-ca")
	if err != nil || got.Metadata.ResourceVersion != created.Metadata.ResourceVersion || got.Type != kubesecret.TypeTLS {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	got.Data["ca.crt"] = []byte("CA")
	updated, err := c.Update(ctx, got)
	if err != nil || updated.Metadata.ResourceVersion == got.Metadata.ResourceVersion {
		t.Fatalf("Update = %+v, %v", updated, err)
	}
	// got still carries the old resourceVersion: a stale write is refused.
	if _, err := c.Update(ctx, got); !errors.Is(err, kubesecret.ErrConflict) || errors.Is(err, kubesecret.ErrExists) {
		t.Fatalf("stale Update: %v, want ErrConflict only", err)
	}
	got.Metadata.ResourceVersion = ""
	if _, err := c.Update(ctx, got); !errors.Is(err, kubesecret.ErrConfig) {
		t.Fatalf("Update without resourceVersion: %v", err)
	}

	// What went over the wire.
	reqs := srv.Requests()
	want := []struct{ method, name string }{
		{http.MethodGet, "portico-tls-ca"}, {http.MethodPost, ""}, {http.MethodPost, ""},
		{http.MethodGet, "portico-tls-ca"}, {http.MethodPut, "portico-tls-ca"}, {http.MethodPut, "portico-tls-ca"},
	}
	if len(reqs) != len(want) {
		t.Fatalf("%d requests, want %d: %+v", len(reqs), len(want), reqs)
	}
	for i, w := range want {
		r := reqs[i]
		wantPath := "/api/v1/namespaces/" + ns + "/secrets"
		if w.name != "" {
			wantPath += "/" + w.name
		}
		if r.Method != w.method || r.Path != wantPath {
			t.Errorf("request %d = %s %s, want %s %s", i, r.Method, r.Path, w.method, wantPath)
		}
	}
	post := reqs[1].Body
	if post.Metadata.Name != "portico-tls-ca" || post.Metadata.Namespace != ns || post.Metadata.ResourceVersion != "" ||
		post.Type != kubesecret.TypeTLS || string(post.Data["tls.crt"]) != "CERT" || post.Metadata.Labels["a"] != "b" {
		t.Errorf("POST body = %+v", post)
	}
	if put := reqs[4].Body; put.Metadata.ResourceVersion != created.Metadata.ResourceVersion || string(put.Data["ca.crt"]) != "CA" {
		t.Errorf("PUT body = %+v", put.Metadata)
	}
}

// The token is read at every call: the kubelet rotates projected tokens
// in place, and a long renewal run must follow.
func TestTokenIsReadAtEveryCall(t *testing.T) {
	srv := kubesecrettest.New(t, ns, "tok-1")
	host, port := srv.HostPort()
	t.Setenv("KUBERNETES_SERVICE_HOST", host)
	t.Setenv("KUBERNETES_SERVICE_PORT", port)
	dir := srv.ServiceAccountDir(t)
	cfg, err := kubesecret.InCluster(dir, "other-ns")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Namespace != "other-ns" || cfg.Server != "https://"+host+":"+port {
		t.Fatalf("config = %+v", cfg)
	}
	cfg.Namespace = ns
	c, err := kubesecret.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Get(ctx, "x"); !errors.Is(err, kubesecret.ErrNotFound) {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("tok-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "x"); !errors.Is(err, kubesecret.ErrForbidden) {
		t.Fatalf("with a token the server does not know: %v, want ErrForbidden", err)
	}
	srv.Token = "tok-2"
	if _, err := c.Get(ctx, "x"); !errors.Is(err, kubesecret.ErrNotFound) {
		t.Fatalf("after rotation: %v", err)
	}
}

func TestForbiddenAndErrorsCarryNoSecretData(t *testing.T) {
	srv := kubesecrettest.New(t, ns, "tok")
	srv.Allowed = func(verb, name string) bool { return verb == "get" && name == "mine" }
	c := inCluster(t, srv)
	_, err := c.Create(context.Background(), &kubesecret.Secret{Metadata: kubesecret.Metadata{Name: "other"}, Data: map[string][]byte{"tls.key": []byte("PRIVATE-KEY-BYTES")}})
	var apiErr *kubesecret.APIError
	if !errors.Is(err, kubesecret.ErrForbidden) || !errors.As(err, &apiErr) || apiErr.Code != http.StatusForbidden {
		t.Fatalf("create outside the Role: %v", err)
	}
	if strings.Contains(err.Error(), "PRIVATE-KEY") {
		t.Errorf("error quotes Secret data: %v", err)
	}
}

// The API server's certificate is verified against the service account's
// ca.crt: a bundle of another CA fails the call before it is sent.
func TestVerifiesTheAPIServer(t *testing.T) {
	srv := kubesecrettest.New(t, ns, "tok")
	dir := srv.ServiceAccountDir(t)
	other, err := pki.NewCA("other.test", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), other.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	host, port := srv.HostPort()
	t.Setenv("KUBERNETES_SERVICE_HOST", host)
	t.Setenv("KUBERNETES_SERVICE_PORT", port)
	cfg, err := kubesecret.InCluster(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubesecret.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(context.Background(), "x"); err == nil || errors.Is(err, kubesecret.ErrNotFound) {
		t.Fatalf("a server with a certificate of another CA answered: %v", err)
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("the request reached an unverified server (%d)", n)
	}
}

func TestInClusterOutsideAPod(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := kubesecret.InCluster(t.TempDir(), "ns"); !errors.Is(err, kubesecret.ErrConfig) {
		t.Fatalf("InCluster without the env: %v", err)
	}
	for _, cfg := range []kubesecret.Config{
		{Server: "http://127.0.0.1:1", TokenFile: "t", Namespace: "n"},
		{Server: "https://127.0.0.1:1", TokenFile: "t"},
		{Server: "https://127.0.0.1:1", TokenFile: "t", Namespace: "n"}, // no CA
	} {
		if _, err := kubesecret.New(cfg); !errors.Is(err, kubesecret.ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
}
