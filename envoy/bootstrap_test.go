// Package envoy holds the Envoy bootstrap files; its test checks that they
// parse strictly into the Envoy v3 Bootstrap proto and validate.
package envoy

import (
	"os"
	"path/filepath"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	// Extension types referenced through Any in the bootstrap files.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
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
			js, err := yaml.YAMLToJSON(raw)
			if err != nil {
				t.Fatal(err)
			}
			var b bootstrapv3.Bootstrap
			if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(js, &b); err != nil {
				t.Fatalf("strict parse: %v", err)
			}
			if err := b.ValidateAll(); err != nil {
				t.Fatalf("validate: %v", err)
			}
			if f == "bootstrap.yaml" {
				checkGateway(t, &b)
			}
		})
	}
}

// checkGateway pins the contract the control plane relies on.
func checkGateway(t *testing.T, b *bootstrapv3.Bootstrap) {
	t.Helper()
	if b.GetNode().GetCluster() != "portico-gateway" || b.GetNode().GetId() == "" {
		t.Errorf("node = %v", b.GetNode())
	}
	if g := b.GetNode().GetMetadata().GetFields()["portico.group"].GetStringValue(); g != "default" {
		t.Errorf("portico.group = %q", g)
	}
	dr := b.GetDynamicResources()
	if dr.GetLdsConfig().GetAds() == nil || dr.GetCdsConfig().GetAds() == nil {
		t.Error("LDS and CDS must come over ADS")
	}
	svc := dr.GetAdsConfig().GetGrpcServices()
	if len(svc) != 1 || svc[0].GetEnvoyGrpc().GetClusterName() != "xds_cluster" {
		t.Errorf("ads grpc services = %v", svc)
	}
	var xds bool
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() != "xds_cluster" {
			continue
		}
		xds = true
		sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		if sa.GetAddress() != "127.0.0.1" || sa.GetPortValue() != 18000 {
			t.Errorf("xds_cluster address = %v", sa)
		}
		if _, ok := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]; !ok {
			t.Error("xds_cluster must speak HTTP/2 (gRPC)")
		}
	}
	if !xds {
		t.Error("no xds_cluster")
	}
	if a := b.GetAdmin().GetAddress().GetSocketAddress(); a.GetAddress() != "127.0.0.1" || a.GetPortValue() != 9901 {
		t.Errorf("admin = %v", a)
	}
}
