package compile

import (
	"bytes"
	"errors"
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

func TestSecretsOnlyInProxyView(t *testing.T) {
	cfg, s, _ := sealedConfig(t)
	snap, err := Compile(cfg, Options{Unseal: s.Open})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.ForProxy().GetResources(SecretType)) != 1 || len(snap.GetResources(SecretType)) != 1 {
		t.Fatal("the proxy view lacks the secret")
	}
	client := snap.ForClient()
	if len(client.GetResources(SecretType)) != 0 || len(client.GetVersionMap(SecretType)) != 0 || client.GetVersion(SecretType) != snap.Version() {
		t.Fatal("the client view holds secrets")
	}
	if client != snap.ForClient() || len(client.GetResources(ListenerType)) != len(snap.GetResources(ListenerType)) {
		t.Fatal("client view unstable or missing listeners")
	}
	plain, err := Compile(spec.NewConfig(1), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if plain.ForClient() != cache.ResourceSnapshot(plain) {
		t.Fatal("a snapshot without secrets should be its own client view")
	}
}
