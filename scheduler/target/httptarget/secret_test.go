package httptarget

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/secret"
	"github.com/portico-io/portico/scheduler/target"
)

// kubeSecretDir lays out a directory as the kubelet mounts a Secret
// volume: the data in a timestamped directory, ..data a symlink to it and
// each key a symlink through ..data. rotate swaps ..data atomically.
func kubeSecretDir(t *testing.T, key, value string) (dir string, rotate func(value string)) {
	t.Helper()
	dir = t.TempDir()
	gen := 0
	write := func(value string) {
		gen++
		data := filepath.Join(dir, "..gen"+strings.Repeat("x", gen))
		if err := os.Mkdir(data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, key), []byte(value), 0o600); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(data), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	write(value)
	if err := os.Symlink(filepath.Join("..data", key), filepath.Join(dir, key)); err != nil {
		t.Fatal(err)
	}
	return dir, write
}

// bind writes a bindings file binding names to tenant "t" (delivery's)
// and destination url.
func bind(t *testing.T, url string, names ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("bindings:\n")
	for _, n := range names {
		b.WriteString("- {secret: " + n + ", tenants: [t], destinations: [\"" + url + "\"]}\n")
	}
	path := filepath.Join(t.TempDir(), "bindings.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func secretDelivery(t *testing.T, url string, ref *jobspec.SecretRef) target.Delivery {
	t.Helper()
	d := delivery(t, url)
	d.Spec.Target.HTTP.SecretRef = ref
	if err := d.Spec.Normalize(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSecretRefHeaderAndRotation: the target receives prefix + value in
// the named header, re-read on every attempt so a rotated value is used
// at once; a body echoing the value back is redacted from the result.
func TestSecretRefHeaderAndRotation(t *testing.T) {
	dir, rotate := kubeSecretDir(t, "billing-token", "s3cr3t-one\n")
	got := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
		if r.Header.Get("X-Echo") != "" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte("bad auth " + r.Header.Get("Authorization")))
		}
	}))
	t.Cleanup(srv.Close)
	tg, err := New(Config{Client: http.DefaultClient, Secrets: secret.NewDir(dir, bind(t, srv.URL, "billing-token"), nil)})
	if err != nil {
		t.Fatal(err)
	}
	d := secretDelivery(t, srv.URL, &jobspec.SecretRef{Name: "billing-token", Prefix: "Bearer "})
	if res := tg.Deliver(context.Background(), d); res.Outcome != target.Succeeded {
		t.Fatalf("first call: %+v", res)
	}
	if h := <-got; h != "Bearer s3cr3t-one" {
		t.Fatalf("Authorization = %q, want the prefixed value without the newline", h)
	}
	rotate("s3cr3t-two")
	if res := tg.Deliver(context.Background(), d); res.Outcome != target.Succeeded {
		t.Fatalf("after rotation: %+v", res)
	}
	if h := <-got; h != "Bearer s3cr3t-two" {
		t.Fatalf("after rotation Authorization = %q, want the new value", h)
	}
	d.Spec.Target.HTTP.Headers = map[string]string{"X-Echo": "1"}
	res := tg.Deliver(context.Background(), d)
	<-got
	if res.Outcome != target.Fatal || strings.Contains(res.Message, "s3cr3t") || !strings.Contains(res.Message, "[REDACTED]") {
		t.Fatalf("echoed secret: %+v", res)
	}
}

// TestSecretRefMissingIsFatalWithoutCall: a missing secret (or no
// directory at all), a secret bound to another tenant or destination, or
// no bindings at all fail the attempt as Fatal naming the secret, before
// any call and without touching the host's breaker.
func TestSecretRefMissingIsFatalWithoutCall(t *testing.T) {
	s := newServer(t, 200)
	dir, _ := kubeSecretDir(t, "other", "x")
	present, _ := kubeSecretDir(t, "billing-token", "x")
	otherTenant := filepath.Join(t.TempDir(), "b.yaml")
	if err := os.WriteFile(otherTenant, []byte("bindings: [{secret: billing-token, tenants: [u], destinations: ['"+s.srv.URL+"']}]"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, sec := range []*secret.Dir{
		secret.NewDir(dir, bind(t, s.srv.URL, "billing-token"), nil), // no such file
		secret.NewDir(present, otherTenant, nil),                     // another tenant's
		secret.NewDir(present, bind(t, "https://elsewhere.example/", "billing-token"), nil),
		secret.NewDir(present, "", nil), // nothing bound
		nil,
	} {
		tg, err := New(Config{Client: http.DefaultClient, Secrets: sec, BreakerFailures: 1})
		if err != nil {
			t.Fatal(err)
		}
		d := secretDelivery(t, s.srv.URL, &jobspec.SecretRef{Name: "billing-token"})
		for range 3 {
			res := tg.Deliver(context.Background(), d)
			if res.Outcome != target.Fatal || !strings.Contains(res.Message, `"billing-token"`) || !strings.Contains(res.Message, "SECRET_UNAVAILABLE") {
				t.Fatalf("missing secret (dir %q): %+v", sec.Path(), res)
			}
		}
		if tg.State(s.srv.URL).String() != "closed" {
			t.Fatalf("breaker moved on a missing secret: %s", tg.State(s.srv.URL))
		}
	}
	if n := s.calls.Load(); n != 0 {
		t.Fatalf("host called %d times", n)
	}
}
