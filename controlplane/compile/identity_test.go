package compile

import (
	"errors"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/portico-io/portico/controlplane/spec"
)

func TestGatewayIdentityMakesServiceCallsMutualTLS(t *testing.T) {
	cfg, _ := loadCase(t, "testdata/in/minimal_echo.yaml")
	gi := &GatewayIdentity{CertFile: "/etc/portico/pki/tls.crt", KeyFile: "/etc/portico/pki/tls.key", CAFile: "/etc/portico/ca/ca.crt", TrustDomain: "example.test"}
	snap, err := Compile(cfg, Options{GatewayIdentity: gi, TracingCollector: "127.0.0.1:4317"})
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, snap, cfg.Version)
	clusters := snap.GetResources(ClusterType)
	for name, role := range map[string]string{ExtAuthzCluster: "extauthz", RateLimitCluster: "ratelimit"} {
		var ctx tlsv3.UpstreamTlsContext
		if err := clusters[name].(*clusterv3.Cluster).GetTransportSocket().GetTypedConfig().UnmarshalTo(&ctx); err != nil {
			t.Fatalf("%s: no UpstreamTlsContext: %v", name, err)
		}
		common := ctx.GetCommonTlsContext()
		if got := common.GetTlsCertificateSdsSecretConfigs(); len(got) != 1 || got[0].GetName() != GatewayCertSecret {
			t.Errorf("%s presents %v", name, got)
		}
		cvc := common.GetCombinedValidationContext()
		san := cvc.GetDefaultValidationContext().GetMatchTypedSubjectAltNames()
		if len(san) != 1 || san[0].GetSanType() != tlsv3.SubjectAltNameMatcher_URI || san[0].GetMatcher().GetPrefix() != "spiffe://example.test/"+role+"/" {
			t.Errorf("%s accepts %v", name, san)
		}
		if cvc.GetValidationContextSdsSecretConfig().GetName() != PlatformCASecret || len(common.GetAlpnProtocols()) != 1 || common.GetAlpnProtocols()[0] != "h2" {
			t.Errorf("%s: CA %q, ALPN %v", name, cvc.GetValidationContextSdsSecretConfig().GetName(), common.GetAlpnProtocols())
		}
	}
	if clusters[TracingCluster].(*clusterv3.Cluster).GetTransportSocket() != nil {
		t.Error("the tracing collector is not a platform workload")
	}
	gw := snap.View(ViewGateway).GetResourcesAndTTL(SecretType)
	cert, ok := gw[GatewayCertSecret].Resource.(*tlsv3.Secret)
	if !ok || cert.GetTlsCertificate().GetPrivateKey().GetFilename() != gi.KeyFile || cert.GetTlsCertificate().GetPrivateKey().GetInlineBytes() != nil ||
		cert.GetTlsCertificate().GetWatchedDirectory().GetPath() != "/etc/portico/pki" {
		t.Fatalf("gateway identity secret: %v", cert)
	}
	if _, ok := gw[PlatformCASecret]; !ok {
		t.Fatal("the gateway view lacks the platform CA")
	}
	if n := len(snap.View(ViewExtAuthz).GetResourcesAndTTL(SecretType)); n != 0 {
		t.Fatalf("extauthz view holds %d secrets", n)
	}

	if _, err := Compile(cfg, Options{GatewayIdentity: &GatewayIdentity{CertFile: "/a", KeyFile: "/b"}}); !errors.Is(err, ErrOptions) {
		t.Fatalf("an incomplete identity: %v", err)
	}
	bad := spec.Secret{Name: "portico-gateway-identity", Type: spec.SecretCA, Files: &spec.SecretFiles{TrustedCA: "/x"}}
	if err := bad.Validate(); err == nil {
		t.Fatal("a user secret took a reserved name")
	}
}

// A redis proxy with cluster.platformTLS reaches the cache nodes with the
// gateway certificate, accepting only cachenode identities and offering no
// ALPN (RESP); without a gateway identity it does not compile.
func TestRedisProxyPlatformTLS(t *testing.T) {
	cfg, _ := loadCase(t, "testdata/in/minimal_echo.yaml")
	if cfg.RedisProxies == nil {
		cfg.RedisProxies = map[string]*spec.RedisProxy{}
	}
	cfg.RedisProxies["cache"] = &spec.RedisProxy{Name: "cache", Listen: spec.RedisListen{Port: 6380},
		Cluster: spec.RedisCluster{Seeds: []spec.RedisSeed{{Address: "127.0.0.1", Port: 7000}}, PlatformTLS: true}}
	if err := cfg.RedisProxies["cache"].Validate(); err != nil {
		t.Fatal(err)
	}
	gi := &GatewayIdentity{CertFile: "/p/gw.crt", KeyFile: "/p/gw.key", CAFile: "/p/ca.crt", TrustDomain: "example.test"}
	snap, err := Compile(cfg, Options{GatewayIdentity: gi})
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, snap, cfg.Version)
	cl := snap.GetResources(ClusterType)[cfg.RedisProxies["cache"].EnvoyName()].(*clusterv3.Cluster)
	var ctx tlsv3.UpstreamTlsContext
	if err := cl.GetTransportSocket().GetTypedConfig().UnmarshalTo(&ctx); err != nil {
		t.Fatalf("no UpstreamTlsContext: %v", err)
	}
	common := ctx.GetCommonTlsContext()
	san := common.GetCombinedValidationContext().GetDefaultValidationContext().GetMatchTypedSubjectAltNames()
	if len(san) != 1 || san[0].GetMatcher().GetPrefix() != "spiffe://example.test/cachenode/" || len(common.GetAlpnProtocols()) != 0 ||
		common.GetTlsCertificateSdsSecretConfigs()[0].GetName() != GatewayCertSecret {
		t.Fatalf("redis cluster TLS: SAN %v, ALPN %v", san, common.GetAlpnProtocols())
	}
	if _, err := Compile(cfg, Options{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("platformTLS without a gateway identity: %v", err)
	}
}
