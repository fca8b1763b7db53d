package secret

import (
	"errors"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestValue(t *testing.T) {
	dir := t.TempDir()
	names := []string{"plain", "nl", "crlf", "ctl", "empty", "big", "missing", "sub"}
	for name, v := range map[string]string{"plain": "abc", "nl": "abc\n", "crlf": "abc\r\n", "ctl": "a\nb", "empty": "\n",
		"big": strings.Repeat("a", MaxValueBytes+1)} {
		writeFile(t, filepath.Join(dir, name), v)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	bindings := filepath.Join(t.TempDir(), "bindings.yaml")
	var b strings.Builder
	b.WriteString("bindings:\n")
	for _, n := range names {
		b.WriteString("- {secret: " + n + ", tenants: [t], destinations: [\"https://x.example/\"]}\n")
	}
	writeFile(t, bindings, b.String())
	d := NewDir(dir, bindings, nil)
	const to = "https://x.example/hook"
	for _, name := range []string{"plain", "nl", "crlf"} {
		if v, err := d.Resolve("t", name, to); err != nil || v != "abc" {
			t.Errorf("%s: %q %v", name, v, err)
		}
	}
	for name, want := range map[string]error{"ctl": ErrInvalidValue, "empty": ErrInvalidValue, "big": ErrInvalidValue,
		"missing": ErrNotFound, "sub": ErrNotFound, "..data": ErrInvalidName, "../etc": ErrInvalidName, "a/b": ErrInvalidName} {
		v, err := d.Resolve("t", name, to)
		if !errors.Is(err, want) || v != "" {
			t.Errorf("%s: got a value of %d bytes, err %v, want %v", name, len(v), err, want)
		}
		if err != nil && strings.Contains(err.Error(), "a\nb") {
			t.Errorf("%s: error carries the value: %v", name, err)
		}
	}
	if _, err := (*Dir)(nil).Resolve("t", "plain", to); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("nil dir: %v", err)
	}
	if NewDir("", bindings, nil) != nil || NewDir("", "", nil).Configured() {
		t.Error("empty path must be not configured")
	}
}

// A secret is given out only to a tenant it is bound to, and only for a
// destination of its binding; an unbound name, another tenant's secret
// and a missing file look the same to the caller before the binding
// check; no bindings file, or a broken one, gives out nothing.
func TestBindings(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "billing"), "v1")
	writeFile(t, filepath.Join(dir, "globex-key"), "v2")
	bindings := filepath.Join(t.TempDir(), "bindings.yaml")
	writeFile(t, bindings, `bindings:
  - secret: billing
    tenants: [acme, initech]
    destinations: ["https://Billing.example.com/hooks/", "http://10.0.0.7:8080"]
  - secret: globex-key
    tenants: [globex]
    destinations: ["https://api.globex.example"]
`)
	d := NewDir(dir, bindings, nil)
	for _, c := range []struct {
		tenant, name, url string
		want              error
	}{
		{"acme", "billing", "https://billing.example.com/hooks/x", nil},
		{"acme", "billing", "https://billing.example.com:443/hooks", nil},
		{"initech", "billing", "http://10.0.0.7:8080/any/path?q=1", nil},
		{"globex", "globex-key", "https://api.globex.example/v1", nil},
		{"acme", "globex-key", "https://api.globex.example/v1", ErrNotBound}, // another tenant's
		{"acme", "nobody", "https://billing.example.com/hooks/x", ErrNotBound},
		{"", "billing", "https://billing.example.com/hooks/x", ErrNotBound},
		{"acme", "billing", "https://billing.example.com/hooksx", ErrDestination},
		{"acme", "billing", "https://billing.example.com/admin", ErrDestination},
		{"acme", "billing", "https://billing.example.com/hooks/../admin", ErrDestination},
		{"acme", "billing", "https://billing.example.com/hooks/%2e%2e/admin", ErrDestination},
		{"acme", "billing", "https://billing.example.com//hooks/x", ErrDestination},
		{"acme", "billing", "http://billing.example.com/hooks/x", ErrDestination}, // scheme
		{"acme", "billing", "https://billing.example.com:8443/hooks/x", ErrDestination},
		{"acme", "billing", "https://billing.example.com.evil.example/hooks/x", ErrDestination},
		{"acme", "billing", "http://10.0.0.7/x", ErrDestination}, // port 80, not 8080
		// What servers may resolve although url.Parse does not (review findings).
		{"acme", "billing", "https://billing.example.com/hooks/..;/admin", ErrDestination},
		{"acme", "billing", "https://billing.example.com/hooks/..\\admin", ErrDestination},
		{"acme", "billing", "https://billing.example.com/hooks/%252e%252e/admin", ErrDestination},
		{"acme", "billing", "https://billing.example.com/hooks%2Fx", ErrDestination},
		{"acme", "billing", "https://billing.example.com/hooks/a%5Cb", ErrDestination},
		// A host that lowercases to the destination but is dialled as
		// another IDNA name (U+0130 İ).
		{"acme", "billing", "https://b\u0130lling.example.com/hooks/x", ErrDestination},
		{"acme", "billing", "https://billing.example.com/hooks/a%20b", nil},
	} {
		v, err := d.Resolve(c.tenant, c.name, c.url)
		if !errors.Is(err, c.want) || (err != nil) != (v == "") {
			t.Errorf("%s %s → %s: %q %v, want %v", c.tenant, c.name, c.url, v, err, c.want)
		}
	}

	// A broken file fails closed; what is wrong goes to the log only (the
	// error reaches run records, and the file names every tenant's secrets).
	var logs strings.Builder
	d = NewDir(dir, bindings, slog.New(slog.NewTextHandler(&logs, nil)))
	writeFile(t, bindings, "bindings:\n  - secret: billing\n    tenants: [acme]\n    destinations: ['https://svc:hunter2@globex.example/']\n")
	for range 3 {
		_, err := d.Resolve("acme", "billing", "https://billing.example.com/hooks/x")
		if !errors.Is(err, ErrBindings) || strings.Contains(err.Error(), "globex") || strings.Contains(err.Error(), "bindings[") {
			t.Fatalf("broken bindings: %v", err)
		}
	}
	if strings.Count(logs.String(), "bindings unusable") != 1 || !strings.Contains(logs.String(), "bindings[0].destinations[0]") || strings.Contains(logs.String(), "hunter2") {
		t.Fatalf("the broken file must be logged once, naming the entry but not its password:\n%s", logs.String())
	}
	writeFile(t, bindings, "bindings: [{secret: billing, tenants: [acme], destinations: ['https://billing.example.com/']}]\n")
	if _, err := d.Resolve("acme", "billing", "https://billing.example.com/hooks/x"); err != nil {
		t.Fatalf("fixed bindings: %v", err)
	}
	if _, err := NewDir(dir, "", nil).Resolve("acme", "billing", "https://billing.example.com/x"); !errors.Is(err, ErrBindings) {
		t.Fatalf("no bindings file: %v", err)
	}
	if _, err := NewDir(dir, filepath.Join(dir, "absent.yaml"), nil).Resolve("acme", "billing", "https://billing.example.com/x"); !errors.Is(err, ErrBindings) {
		t.Fatalf("missing bindings file: %v", err)
	}
}

func TestParseBindingsRefuses(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field":   "bindings: [{secret: a, tenants: [t], destinations: ['https://x/'], tenant: t}]",
		"bad name":        "bindings: [{secret: ../a, tenants: [t], destinations: ['https://x/']}]",
		"no tenants":      "bindings: [{secret: a, destinations: ['https://x/']}]",
		"no destinations": "bindings: [{secret: a, tenants: [t]}]",
		"twice":           "bindings: [{secret: a, tenants: [t], destinations: ['https://x/']}, {secret: a, tenants: [u], destinations: ['https://x/']}]",
		"scheme":          "bindings: [{secret: a, tenants: [t], destinations: ['ftp://x/']}]",
		"credentials":     "bindings: [{secret: a, tenants: [t], destinations: ['https://u:p@x/']}]",
		"query":           "bindings: [{secret: a, tenants: [t], destinations: ['https://x/?a=1']}]",
		"relative":        "bindings: [{secret: a, tenants: [t], destinations: ['/hooks']}]",
		"dots":            "bindings: [{secret: a, tenants: [t], destinations: ['https://x/a/../b']}]",
		"empty tenant":    "bindings: [{secret: a, tenants: [''], destinations: ['https://x/']}]",
		"not yaml":        "bindings: [",
	} {
		if _, err := CheckBindings([]byte(doc)); !errors.Is(err, ErrBindings) {
			t.Errorf("%s: %v, want ErrBindings", name, err)
		}
	}
}

func FuzzDestinationMatch(f *testing.F) {
	f.Add("https://a.example/hooks/", "https://a.example/hooks/x")
	f.Add("http://10.0.0.1:8080", "http://10.0.0.1:8080/../x")
	f.Add("https://a.example/p", "https://a.example/p%2f..%2fq")
	f.Fuzz(func(t *testing.T, dest, target string) {
		d, err := parseDestination(dest)
		if err != nil {
			return
		}
		u, err := url.Parse(target)
		if err != nil || !d.allows(u) {
			return
		}
		// Whatever matched is under the destination once resolved.
		p, ok := canonicalPath(u)
		if !ok || !strings.HasPrefix(p+"/", strings.TrimSuffix(d.path, "/")+"/") {
			t.Fatalf("%q allowed %q (path %q)", dest, target, p)
		}
	})
}
