package controlplane_test

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/pkitest"
	"github.com/portico-io/portico/controlplane/seal"
	"github.com/portico-io/portico/internal/testdeps"
)

// An inline TLS secret created through the admin API is sealed at rest and
// reaches Envoy proxies, unsealed, by SDS next to the HTTPS listener using
// it; other xDS clients never get it. A listener on the built-in
// listener's port is refused.
func TestHTTPSListenerSecretsBySDS(t *testing.T) {
	k, err := seal.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	key, _ := seal.ParseKey(k)
	cp := startWith(t, controlplane.Config{AdminAddr: "127.0.0.1:0", XDSAddr: "127.0.0.1:0",
		DatabaseURL: testdeps.Postgres(t), SecretKey: key})
	ca := pkitest.NewCA(t, "clients")
	leaf := ca.Leaf(t, "gw.example.com")
	create(t, cp.addrs.Admin, "secrets", map[string]any{"name": "gw", "type": "tls", "certificate": leaf.CertPEM, "privateKey": leaf.KeyPEM})
	create(t, cp.addrs.Admin, "secrets", map[string]any{"name": "clients", "type": "ca", "ca": ca.CertPEM})
	v := strconv.FormatInt(create(t, cp.addrs.Admin, "listeners", map[string]any{"name": "https", "port": 10443,
		"tls": map[string]any{"certificates": []string{"gw"}, "clientCa": "clients", "requireClientCert": true}}), 10)

	secrets := fetchAs(t, cp.addrs.XDS, "envoy", resource.SecretType, v)
	var gw tlsv3.Secret
	if err := proto.Unmarshal(secrets["gw"], &gw); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gw.GetTlsCertificate().GetPrivateKey().GetInlineBytes(), []byte(leaf.KeyPEM)) || len(secrets) != 2 {
		t.Fatalf("Envoy got secrets %d, gw key delivered: %v", len(secrets), gw.GetTlsCertificate().GetPrivateKey() != nil)
	}
	if _, ok := fetchAs(t, cp.addrs.XDS, "envoy", resource.ListenerType, v)["https"]; !ok {
		t.Fatal("Envoy did not get the https listener")
	}
	if got := fetchAs(t, cp.addrs.XDS, "gRPC Go", resource.SecretType, v); len(got) != 0 {
		t.Fatalf("a non-Envoy client got %d secrets", len(got))
	}

	var out map[string]any
	code, _ := call(t, http.MethodPost, "http://"+cp.addrs.Admin+"/admin/v1/listeners",
		map[string]any{"name": "clash", "port": 10000}, map[string]string{"Idempotency-Key": "clash"}, &out)
	if e, _ := out["error"].(map[string]any); code != http.StatusUnprocessableEntity || e["field"] != "listeners/clash: port" {
		t.Fatalf("listener on ingress_http's port: %d %v", code, out)
	}
}
