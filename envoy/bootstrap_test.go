// Package envoy holds the Envoy bootstrap files; its test checks that they
// parse strictly into the Envoy v3 Bootstrap proto and validate, and that
// the gateway bootstrap keeps the contract of package envoy/bootstrap.
package envoy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/portico-io/portico/envoy/bootstrap"
)

func TestBootstrapFilesParseStrictlyAndValidate(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no bootstrap files")
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			b, err := bootstrap.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			if f == "bootstrap.yaml" {
				checkGateway(t, b)
			}
		})
	}
}

// checkGateway pins the shared contract plus what is local to make run:
// the control plane on loopback, group "default".
func checkGateway(t *testing.T, b *bootstrapv3.Bootstrap) {
	t.Helper()
	lim, err := bootstrap.CheckGateway(b)
	if err != nil {
		t.Error(err)
	}
	if g := b.GetNode().GetMetadata().GetFields()[bootstrap.GroupKey].GetStringValue(); g != "default" {
		t.Errorf("portico.group = %q", g)
	}
	if lim.StatsAddr != "127.0.0.1" {
		t.Errorf("stats listener on %q: a local gateway keeps it on loopback", lim.StatsAddr)
	}
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() != bootstrap.XDSCluster {
			continue
		}
		sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		if sa.GetAddress() != "127.0.0.1" || sa.GetPortValue() != 18000 {
			t.Errorf("xds_cluster address = %v", sa)
		}
	}
	m, err := bootstrap.CheckXDSMutualTLS(b)
	if err != nil {
		t.Fatal(err)
	}
	// The SDS files the bootstrap names exist, parse strictly and hold the
	// secrets it asks for, from make run's .run/pki.
	for path, name := range map[string]string{m.CertPath: m.CertSecret, m.CAPath: m.CASecret} {
		raw, err := os.ReadFile(filepath.Join("..", path))
		if err != nil {
			t.Fatal(err)
		}
		js, err := yaml.YAMLToJSON(raw)
		if err != nil {
			t.Fatal(err)
		}
		var resp discovery.DiscoveryResponse
		if err := protojson.Unmarshal(js, &resp); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(resp.GetResources()) != 1 {
			t.Fatalf("%s: %d resources", path, len(resp.GetResources()))
		}
		var sec tlsv3.Secret
		if err := resp.GetResources()[0].UnmarshalTo(&sec); err != nil {
			t.Fatal(err)
		}
		if err := sec.ValidateAll(); err != nil || sec.GetName() != name {
			t.Fatalf("%s: secret %q (%v), want %q", path, sec.GetName(), err, name)
		}
		if !strings.Contains(string(raw), ".run/pki/") {
			t.Errorf("%s does not read make run's .run/pki", path)
		}
	}
}

// Without the transport socket the check fails: a plaintext bootstrap would
// otherwise pass silently.
func TestCheckXDSMutualTLSRefusesPlaintext(t *testing.T) {
	raw, err := os.ReadFile("bootstrap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := bootstrap.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == bootstrap.XDSCluster {
			c.TransportSocket = nil
		}
	}
	if _, err := bootstrap.CheckXDSMutualTLS(b); err == nil {
		t.Fatal("a plaintext xds_cluster passed")
	}
}

// Without ALPN h2 the control plane's grpc-go server would refuse the
// handshake, so the check refuses such a bootstrap.
func TestCheckXDSMutualTLSRequiresALPN(t *testing.T) {
	raw, err := os.ReadFile("bootstrap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := bootstrap.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() != bootstrap.XDSCluster {
			continue
		}
		var ctx tlsv3.UpstreamTlsContext
		if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(&ctx); err != nil {
			t.Fatal(err)
		}
		ctx.CommonTlsContext.AlpnProtocols = nil
		if err := c.GetTransportSocket().GetTypedConfig().MarshalFrom(&ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := bootstrap.CheckXDSMutualTLS(b); err == nil || !strings.Contains(err.Error(), "ALPN") {
		t.Fatalf("an xds_cluster without ALPN h2: %v", err)
	}
}
