package spec_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/portico-io/portico/controlplane/pkitest"
	"github.com/portico-io/portico/controlplane/spec"
)

func js(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestSecretAndListenerValidation(t *testing.T) {
	ca := pkitest.NewCA(t, "test ca")
	srv := ca.Leaf(t, "gw.example.com")
	other := ca.Leaf(t, "other.example.com")
	const sealed = "v1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

	cases := []struct {
		name  string
		kind  spec.Kind
		body  string
		field string // "" = valid
		code  string
	}{
		{"tls inline", spec.KindSecret, js(map[string]any{"name": "gw", "type": "tls", "certificate": srv.CertPEM, "privateKey": srv.KeyPEM}), "", ""},
		{"tls chain", spec.KindSecret, js(map[string]any{"name": "gw", "type": "tls", "certificate": srv.CertPEM + ca.CertPEM, "privateKey": srv.KeyPEM}), "", ""},
		{"tls sealed", spec.KindSecret, js(map[string]any{"name": "gw", "type": "tls", "certificate": srv.CertPEM, "sealedPrivateKey": sealed}), "", ""},
		{"tls files", spec.KindSecret, `{"name":"gw","type":"tls","files":{"certificateChain":"/etc/gw/cert.pem","privateKey":"/etc/gw/key.pem"}}`, "", ""},
		{"ca inline", spec.KindSecret, js(map[string]any{"name": "ca", "type": "ca", "ca": ca.CertPEM}), "", ""},
		{"ca files", spec.KindSecret, `{"name":"ca","type":"ca","files":{"trustedCa":"/etc/ssl/ca.pem"}}`, "", ""},
		{"no type", spec.KindSecret, `{"name":"x"}`, "type", spec.CodeRequired},
		{"bad type", spec.KindSecret, `{"name":"x","type":"opaque"}`, "type", spec.CodeInvalid},
		{"mismatched key", spec.KindSecret, js(map[string]any{"name": "gw", "type": "tls", "certificate": srv.CertPEM, "privateKey": other.KeyPEM}), "privateKey", spec.CodeInvalid},
		{"key not PEM", spec.KindSecret, js(map[string]any{"name": "gw", "type": "tls", "certificate": srv.CertPEM, "privateKey": "nope"}), "privateKey", spec.CodeInvalid},
		{"missing key", spec.KindSecret, js(map[string]any{"name": "gw", "type": "tls", "certificate": srv.CertPEM}), "privateKey", spec.CodeRequired},
		{"key as cert", spec.KindSecret, js(map[string]any{"name": "gw", "type": "tls", "certificate": srv.KeyPEM, "privateKey": srv.KeyPEM}), "certificate", spec.CodeInvalid},
		{"garbage cert", spec.KindSecret, `{"name":"gw","type":"tls","certificate":"hello","privateKey":"x"}`, "certificate", spec.CodeInvalid},
		{"bad sealed", spec.KindSecret, js(map[string]any{"name": "gw", "type": "tls", "certificate": srv.CertPEM, "sealedPrivateKey": "plain"}), "sealedPrivateKey", spec.CodeInvalid},
		{"inline and files", spec.KindSecret, js(map[string]any{"name": "gw", "type": "tls", "certificate": srv.CertPEM, "files": map[string]string{"privateKey": "/k"}}), "files", spec.CodeInvalid},
		{"relative path", spec.KindSecret, `{"name":"gw","type":"tls","files":{"certificateChain":"cert.pem","privateKey":"/k.pem"}}`, "files.certificateChain", spec.CodeInvalid},
		{"tls with ca", spec.KindSecret, js(map[string]any{"name": "gw", "type": "tls", "ca": ca.CertPEM}), "ca", spec.CodeInvalid},
		{"ca with key", spec.KindSecret, js(map[string]any{"name": "ca", "type": "ca", "ca": ca.CertPEM, "privateKey": srv.KeyPEM}), "certificate", spec.CodeInvalid},
		{"ca empty", spec.KindSecret, `{"name":"ca","type":"ca"}`, "ca", spec.CodeRequired},
		{"ca file with chain", spec.KindSecret, `{"name":"ca","type":"ca","files":{"trustedCa":"/a","certificateChain":"/b"}}`, "files", spec.CodeInvalid},

		{"https listener", spec.KindListener, `{"name":"https","port":10443,"tls":{"certificates":["gw"],"clientCa":"ca","requireClientCert":true,"minVersion":"1.3","alpn":["h2"]}}`, "", ""},
		{"plain listener", spec.KindListener, `{"name":"alt","address":"127.0.0.1","port":8081}`, "", ""},
		{"reserved name", spec.KindListener, `{"name":"ingress_http","port":1}`, "name", spec.CodeInvalid},
		{"stats listener name", spec.KindListener, `{"name":"envoy_stats","port":1}`, "name", spec.CodeInvalid},
		{"no port", spec.KindListener, `{"name":"l"}`, "port", spec.CodeInvalid},
		{"bad address", spec.KindListener, `{"name":"l","port":1,"address":"localhost"}`, "address", spec.CodeInvalid},
		{"no certificates", spec.KindListener, `{"name":"l","port":1,"tls":{}}`, "tls.certificates", spec.CodeRequired},
		{"dup certificate", spec.KindListener, `{"name":"l","port":1,"tls":{"certificates":["a","a"]}}`, "tls.certificates[1]", spec.CodeConflict},
		{"require without ca", spec.KindListener, `{"name":"l","port":1,"tls":{"certificates":["a"],"requireClientCert":true}}`, "tls.clientCa", spec.CodeRequired},
		{"tls 1.1", spec.KindListener, `{"name":"l","port":1,"tls":{"certificates":["a"],"minVersion":"1.1"}}`, "tls.minVersion", spec.CodeInvalid},
		{"bad alpn", spec.KindListener, `{"name":"l","port":1,"tls":{"certificates":["a"],"alpn":["spdy/3"]}}`, "tls.alpn[0]", spec.CodeInvalid},
		{"cluster bad sni", spec.KindCluster, `{"name":"c","endpoints":[{"address":"10.0.0.1","port":443}],"tls":{"sni":"not a host"}}`, "tls.sni", spec.CodeInvalid},
		{"cluster mtls", spec.KindCluster, `{"name":"c","endpoints":[{"address":"10.0.0.1","port":443}],"tls":{"caSecret":"ca","clientCertificate":"gw"}}`, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := spec.Decode(tc.kind, []byte(tc.body))
			if tc.field == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var fe *spec.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || fe.Code != tc.code {
				t.Fatalf("got %v (%+v), want %s/%s", err, fe, tc.field, tc.code)
			}
			if strings.Contains(fe.Message, "PRIVATE KEY") {
				t.Fatalf("error message quotes key material: %s", fe.Message)
			}
		})
	}
}

func TestConfigSecretReferences(t *testing.T) {
	base := func() *spec.Config {
		c := spec.NewConfig(1)
		c.Put(spec.KindSecret, &spec.Secret{Name: "gw", Type: spec.SecretTLS, Files: &spec.SecretFiles{CertificateChain: "/c", PrivateKey: "/k"}})
		c.Put(spec.KindSecret, &spec.Secret{Name: "ca", Type: spec.SecretCA, Files: &spec.SecretFiles{TrustedCA: "/ca"}})
		c.Put(spec.KindCluster, &spec.Cluster{Name: "up", Endpoints: []spec.Endpoint{{Address: "10.0.0.1", Port: 443}},
			TLS: &spec.UpstreamTLS{CASecret: "ca", ClientCertificate: "gw"}})
		c.Put(spec.KindListener, &spec.Listener{Name: "https", Port: 10443,
			TLS: &spec.ListenerTLS{Certificates: []string{"gw"}, ClientCA: "ca", RequireClientCert: true}})
		return c
	}
	if err := base().Validate(); err != nil {
		t.Fatal(err)
	}
	if got := base().SecretUsers("gw"); strings.Join(got, ";") != "clusters/up: tls.clientCertificate;listeners/https: tls.certificates[0]" {
		t.Fatalf("SecretUsers: %v", got)
	}
	if got := base().ReferencedSecrets(); strings.Join(got, ",") != "ca,gw" {
		t.Fatalf("ReferencedSecrets: %v", got)
	}
	for name, tc := range map[string]struct {
		mutate      func(*spec.Config)
		field, code string
	}{
		"ca as certificate": {func(c *spec.Config) { c.Listeners["https"].TLS.Certificates = []string{"ca"} }, "listeners/https: tls.certificates[0]", spec.CodeInvalid},
		"tls as client ca":  {func(c *spec.Config) { c.Listeners["https"].TLS.ClientCA = "gw" }, "listeners/https: tls.clientCa", spec.CodeInvalid},
		"unknown cert":      {func(c *spec.Config) { c.Listeners["https"].TLS.Certificates = []string{"nope"} }, "listeners/https: tls.certificates[0]", spec.CodeUnknownRef},
		"cluster ca as tls": {func(c *spec.Config) { c.Clusters["up"].TLS.ClientCertificate = "ca" }, "clusters/up: tls.clientCertificate", spec.CodeInvalid},
		"cluster no ca":     {func(c *spec.Config) { c.Clusters["up"].TLS.CASecret = "nope" }, "clusters/up: tls.caSecret", spec.CodeUnknownRef},
		"port collision": {func(c *spec.Config) {
			c.Put(spec.KindListener, &spec.Listener{Name: "alt", Port: 10443})
		}, "listeners/https: port", spec.CodeConflict},
		"host named like listener": {func(c *spec.Config) {
			c.Put(spec.KindRoute, &spec.Route{Name: "r", Match: spec.RouteMatch{PathPrefix: "/", Hosts: []string{"HTTPS"}}, Cluster: "up"})
		}, "listeners/https: name", spec.CodeConflict},
	} {
		t.Run(name, func(t *testing.T) {
			c := base()
			tc.mutate(c)
			var fe *spec.FieldError
			if err := c.Validate(); !errors.As(err, &fe) || fe.Field != tc.field || fe.Code != tc.code {
				t.Fatalf("got %v, want %s/%s", err, tc.field, tc.code)
			}
		})
	}
}

// FuzzDecodeTLS: decoding secrets and listeners never panics, and a
// rejected secret's error never echoes private key material.
func FuzzDecodeTLS(f *testing.F) {
	f.Add(`{"name":"gw","type":"tls","certificate":"-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n","privateKey":"-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n"}`)
	f.Add(`{"name":"ca","type":"ca","files":{"trustedCa":"/etc/ca.pem"}}`)
	f.Add(`{"name":"https","port":443,"tls":{"certificates":["gw"],"minVersion":"1.3","alpn":["h2"]}}`)
	f.Add(`{"name":"gw","type":"tls","sealedPrivateKey":"v1:AAAA"}`)
	f.Fuzz(func(t *testing.T, body string) {
		for _, k := range []spec.Kind{spec.KindSecret, spec.KindListener} {
			_, err := spec.Decode(k, []byte(body))
			if err != nil && strings.Contains(err.Error(), "PRIVATE KEY-----") {
				t.Fatalf("error echoes key material: %v", err)
			}
		}
	})
}
