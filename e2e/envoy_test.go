package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/xdstest"
)

// envoyBinary finds a live Envoy: $ENVOY_BIN, else envoy on PATH.
func envoyBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ENVOY_BIN"); p != "" {
		return p
	}
	p, err := exec.LookPath("envoy")
	if err != nil {
		t.Skip("SKIPPED: no envoy binary (set ENVOY_BIN or put envoy on PATH); the live-Envoy test did not run")
	}
	return p
}

func freePort(t *testing.T) int { return testdeps.FreePort(t) }

func post(t *testing.T, url, key string, body any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Idempotency-Key", key)
	authorize(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, raw)
	}
}

// A real Envoy, bootstrapped from envoy/bootstrap.yaml, receives the
// configuration pushed through the admin API: a known route reaches the
// upstream, client-supplied x-portico-* headers are stripped, unknown paths
// get 404 (deny by default).
func TestLiveEnvoy(t *testing.T) {
	envoy := envoyBinary(t)
	dbURL := testdeps.Postgres(t)
	listenerPort, adminPort := freePort(t), freePort(t)

	var mu sync.Mutex
	var seen http.Header
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = r.Header.Clone()
		mu.Unlock()
		fmt.Fprint(w, "upstream")
	}))
	defer up.Close()
	upPort := up.Listener.Addr().(*net.TCPAddr).Port

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := startControlPlane(t, dbURL, controlplane.Config{Compile: compileOptions(listenerPort)})
	base := "http://" + addrs.Admin + "/admin/v1"
	post(t, base+"/clusters", "c", map[string]any{"name": "echo", "endpoints": []any{map[string]any{"address": "127.0.0.1", "port": upPort}}})
	post(t, base+"/routes", "r", map[string]any{"name": "echo", "match": map[string]any{"pathPrefix": "/echo"}, "cluster": "echo", "auth": map[string]any{"mode": "none"}})

	raw, err := os.ReadFile(filepath.Join("..", "envoy", "bootstrap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, xdsPort, _ := net.SplitHostPort(addrs.XDS)
	boot := strings.ReplaceAll(string(raw), "port_value: 18000", "port_value: "+xdsPort)
	boot = strings.ReplaceAll(boot, "port_value: 9901", fmt.Sprintf("port_value: %d", adminPort))
	bootPath := filepath.Join(t.TempDir(), "bootstrap.yaml")
	if err := os.WriteFile(bootPath, []byte(boot), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, envoy, "-c", bootPath, "--base-id", fmt.Sprint(adminPort), "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	url := fmt.Sprintf("http://127.0.0.1:%d", listenerPort)
	xdstest.Eventually(t, 30*time.Second, "Envoy to route /echo to the upstream", func() bool {
		req, _ := http.NewRequest(http.MethodGet, url+"/echo", nil)
		req.Header.Set("x-portico-consumer", "spoofed")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && string(body) == "upstream"
	})
	mu.Lock()
	v := seen.Get("x-portico-consumer")
	mu.Unlock()
	if v != "" {
		t.Fatalf("client-supplied x-portico-consumer reached the upstream: %q", v)
	}
	resp, err := http.Get(url + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown route: %d, want 404", resp.StatusCode)
	}
}

func compileOptions(listenerPort int) compile.Options {
	return compile.Options{ListenerAddress: "127.0.0.1", ListenerPort: uint32(listenerPort)}
}
