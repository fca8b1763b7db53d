package e2e_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/pkitest"
	"github.com/portico-io/portico/controlplane/seal"
	"github.com/portico-io/portico/internal/testdeps"
)

func keyPair(t *testing.T, c *pkitest.Cert) tls.Certificate {
	t.Helper()
	kp, err := tls.X509KeyPair([]byte(c.CertPEM), []byte(c.KeyPEM))
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func pool(t *testing.T, c *pkitest.Cert) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM([]byte(c.CertPEM)) {
		t.Fatal("bad CA PEM")
	}
	return p
}

// A real Envoy terminates HTTPS with a certificate it got by SDS, requires
// a client certificate (mTLS), and reaches an upstream that itself requires
// Envoy's client certificate, verified against a CA delivered by SDS.
func TestLiveEnvoyHTTPSAndUpstreamMTLS(t *testing.T) {
	envoy := envoyBinary(t)
	dbURL := testdeps.Postgres(t)
	listenerPort, httpsPort, adminPort := freePort(t), freePort(t), freePort(t)

	gwCA, clientCA, upCA := pkitest.NewCA(t, "gateway ca"), pkitest.NewCA(t, "client ca"), pkitest.NewCA(t, "upstream ca")
	gwCert, clientCert := gwCA.Leaf(t, "gw.example.com"), clientCA.Leaf(t, "client.example.com")
	upCert, envoyClient := upCA.Leaf(t, "up.example.com"), clientCA.Leaf(t, "envoy.example.com")

	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "upstream saw "+r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{keyPair(t, upCert)},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool(t, clientCA), MinVersion: tls.VersionTLS12}
	up.StartTLS()
	defer up.Close()
	upPort := up.Listener.Addr().(*net.TCPAddr).Port

	k, err := seal.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	key, _ := seal.ParseKey(k)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := startControlPlane(t, dbURL, controlplane.Config{Compile: compileOptions(listenerPort), SecretKey: key})
	base := "http://" + addrs.Admin + "/admin/v1"
	post(t, base+"/secrets", "s1", map[string]any{"name": "gw", "type": "tls", "certificate": gwCert.CertPEM, "privateKey": gwCert.KeyPEM})
	post(t, base+"/secrets", "s2", map[string]any{"name": "clients", "type": "ca", "ca": clientCA.CertPEM})
	post(t, base+"/secrets", "s3", map[string]any{"name": "up-ca", "type": "ca", "ca": upCA.CertPEM})
	post(t, base+"/secrets", "s4", map[string]any{"name": "envoy-client", "type": "tls", "certificate": envoyClient.CertPEM, "privateKey": envoyClient.KeyPEM})
	post(t, base+"/clusters", "c", map[string]any{"name": "echo", "endpoints": []any{map[string]any{"address": "127.0.0.1", "port": upPort}},
		"tls": map[string]any{"sni": "up.example.com", "caSecret": "up-ca", "clientCertificate": "envoy-client"}})
	post(t, base+"/routes", "r", map[string]any{"name": "echo", "match": map[string]any{"pathPrefix": "/echo"}, "cluster": "echo", "auth": map[string]any{"mode": "none"}})
	post(t, base+"/listeners", "l", map[string]any{"name": "https", "address": "127.0.0.1", "port": httpsPort,
		"tls": map[string]any{"certificates": []string{"gw"}, "clientCa": "clients", "requireClientCert": true}})

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

	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: pool(t, gwCA), ServerName: "gw.example.com", Certificates: certs, MinVersion: tls.VersionTLS12}}}
	}
	url := fmt.Sprintf("https://127.0.0.1:%d/echo", httpsPort)
	mtls := client(keyPair(t, clientCert))
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for {
		resp, err := mtls.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && string(body) == "upstream saw envoy.example.com" {
				break
			}
			err = fmt.Errorf("%d %s", resp.StatusCode, body)
		}
		select {
		case <-deadline:
			t.Fatalf("no HTTPS+mTLS round trip within 30s (last: %v)", err)
		case <-tick.C:
		}
	}
	// Without a client certificate the handshake (or the first read) fails.
	if resp, err := client().Get(url); err == nil {
		resp.Body.Close()
		t.Fatalf("request without a client certificate got %d", resp.StatusCode)
	}
}
