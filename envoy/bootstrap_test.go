// Package envoy holds the Envoy bootstrap files; its test checks that they
// parse strictly into the Envoy v3 Bootstrap proto and validate, and that
// the gateway bootstrap keeps the contract of package envoy/bootstrap.
package envoy

import (
	"os"
	"path/filepath"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"

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
}
