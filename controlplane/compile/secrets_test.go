package compile

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"

	"github.com/portico-io/portico/controlplane/pkitest"
	"github.com/portico-io/portico/controlplane/seal"
	"github.com/portico-io/portico/controlplane/spec"
)

// sealedConfig is an HTTPS listener whose certificate's key is sealed with
// a real Sealer.
func sealedConfig(t *testing.T) (*spec.Config, *seal.Sealer, string) {
	t.Helper()
	k, err := seal.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	key, _ := seal.ParseKey(k)
	s, err := seal.New(key)
	if err != nil {
		t.Fatal(err)
	}
	leaf := pkitest.NewCA(t, "ca").Leaf(t, "gw.example.com")
	sealed, err := s.Seal([]byte(leaf.KeyPEM))
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := loadCase(t, "testdata/in/minimal_echo.yaml")
	cfg = cfg.Clone()
	cfg.Secrets = map[string]*spec.Secret{"gw": {Name: "gw", Type: spec.SecretTLS, Certificate: leaf.CertPEM, SealedPrivateKey: sealed}}
	cfg.Listeners = map[string]*spec.Listener{"https": {Name: "https", Port: 10443, TLS: &spec.ListenerTLS{Certificates: []string{"gw"}}}}
	return cfg, s, leaf.KeyPEM
}

func TestSealedSecretIsUnsealedForEnvoy(t *testing.T) {
	cfg, s, keyPEM := sealedConfig(t)
	snap, err := Compile(cfg, Options{Unseal: s.Open})
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, snap, cfg.Version)
	got := snap.GetResources(SecretType)["gw"].(*tlsv3.Secret).GetTlsCertificate().GetPrivateKey().GetInlineBytes()
	if !bytes.Equal(got, []byte(keyPEM)) {
		t.Fatal("the served private key is not the unsealed key")
	}

	if _, err := Compile(cfg, Options{}); !errors.Is(err, ErrUnseal) {
		t.Fatalf("no Unseal: %v", err)
	}
	other, _ := seal.New(bytes.Repeat([]byte{1}, seal.KeySize))
	_, err = Compile(cfg, Options{Unseal: other.Open})
	if !errors.Is(err, ErrUnseal) || !errors.Is(err, seal.ErrOpen) {
		t.Fatalf("wrong key: %v", err)
	}
	if bytes.Contains([]byte(err.Error()), []byte("PRIVATE KEY")) {
		t.Fatal("error holds key material")
	}
}

func TestListenerPortCollidesWithIngress(t *testing.T) {
	cfg, s, _ := sealedConfig(t)
	cfg.Listeners["https"].Port = 8080
	var fe *spec.FieldError
	if err := CheckConfig(cfg, Options{ListenerPort: 8080}); !errors.As(err, &fe) || fe.Field != "listeners/https: port" || fe.Code != spec.CodeConflict {
		t.Fatalf("CheckConfig: %v", err)
	}
	if _, err := Compile(cfg, Options{ListenerPort: 8080, Unseal: s.Open}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Compile: %v", err)
	}
	if err := CheckConfig(cfg, Options{}); err != nil {
		t.Fatalf("default port 10000: %v", err)
	}
}

// Each view holds the types its role consumes and nothing else; the
// gateway's holds only the secrets its listeners and clusters reference.
func TestViews(t *testing.T) {
	cfg, s, _ := sealedConfig(t)
	snap, err := Compile(cfg, Options{Unseal: s.Open})
	if err != nil {
		t.Fatal(err)
	}
	count := func(v cache.ResourceSnapshot, typeURL string) int { return len(v.GetResourcesAndTTL(typeURL)) }
	for v, want := range map[View][]string{
		ViewGateway:   {ClusterType, EndpointType, ListenerType, RouteType, SecretType},
		ViewRouting:   {ClusterType, EndpointType, ListenerType, RouteType},
		ViewExtAuthz:  {JwtProviderType, ApiKeyShardType, RevocationListType},
		ViewRateLimit: {RateLimitConfigType, RateLimitRuleType},
	} {
		view := snap.View(v)
		if view != snap.View(v) || view.(*Snapshot).View(v) != view {
			t.Errorf("view %d is not one stable value", v)
		}
		for _, typeURL := range TypeURLs {
			got, kept := count(view, typeURL), slices.Contains(want, typeURL)
			if !kept && (got != 0 || len(view.GetVersionMap(typeURL)) != 0) {
				t.Errorf("view %d holds %d %s", v, got, typeURL)
			}
			if kept && typeURL != ListenerType && typeURL != SecretType && got != count(snap, typeURL) {
				t.Errorf("view %d holds %d of %d %s", v, got, count(snap, typeURL), typeURL)
			}
			if view.GetVersion(typeURL) != snap.Version() {
				t.Errorf("view %d: %s version %q, want %q (an empty answer, not none)", v, typeURL, view.GetVersion(typeURL), snap.Version())
			}
		}
	}
	if count(snap.View(ViewGateway), SecretType) != 1 || count(snap, SecretType) != 1 {
		t.Fatal("the gateway view lacks the listener's secret")
	}

	// A secret no listener or cluster references stays out of the gateway
	// view even when a snapshot holds it.
	res := map[string][]Resource{}
	for _, typeURL := range TypeURLs {
		res[typeURL] = snap.Resources(typeURL)
	}
	res[SecretType] = append(res[SecretType], &tlsv3.Secret{Name: "orphan"})
	withOrphan, err := newSnapshot(snap.Version(), res)
	if err != nil {
		t.Fatal(err)
	}
	secrets := withOrphan.View(ViewGateway).GetResourcesAndTTL(SecretType)
	if _, ok := secrets["orphan"]; ok || len(secrets) != 1 {
		t.Fatalf("gateway view secrets: %v", secrets)
	}
}
