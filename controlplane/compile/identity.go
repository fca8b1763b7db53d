package compile

import (
	"fmt"
	"path/filepath"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// GatewayIdentity is the gateways' own workload certificate, as files on
// the gateway hosts. With it, Envoy calls extauthz and ratelimitsvc over
// mutual TLS: it presents this certificate and accepts only a server whose
// URI SAN is spiffe://<TrustDomain>/extauthz/… (resp. /ratelimit/…).
//
// The files reach Envoy as two SDS secrets holding only their paths (no key
// material crosses xDS), with the certificate's directory watched, so a
// renewed certificate is used by the next connection without a restart.
type GatewayIdentity struct {
	CertFile, KeyFile, CAFile string
	TrustDomain               string
}

// Names of the SDS secrets GatewayIdentity compiles to; spec validation
// keeps user secrets off the "portico-" prefix.
const (
	GatewayCertSecret = "portico-gateway-identity"
	PlatformCASecret  = "portico-platform-ca"
)

func (g *GatewayIdentity) check() error {
	if g.CertFile == "" || g.KeyFile == "" || g.CAFile == "" || g.TrustDomain == "" {
		return fmt.Errorf("%w: gateway identity needs its certificate, key and CA files and the trust domain", ErrOptions)
	}
	return nil
}

// secrets returns the two path-only secrets.
func (g *GatewayIdentity) secrets() []Resource {
	return []Resource{
		&tlsv3.Secret{Name: GatewayCertSecret, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: fileSource(g.CertFile),
			PrivateKey:       fileSource(g.KeyFile),
			WatchedDirectory: &corev3.WatchedDirectory{Path: filepath.Dir(g.CertFile)},
		}}},
		&tlsv3.Secret{Name: PlatformCASecret, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa:        fileSource(g.CAFile),
			WatchedDirectory: &corev3.WatchedDirectory{Path: filepath.Dir(g.CAFile)},
		}}},
	}
}

// transportSocket is the mutual TLS of a call to the service of role:
// ALPN h2 for the gRPC services (grpc-go servers require it), none for RESP.
func (g *GatewayIdentity) transportSocket(role string) (*corev3.TransportSocket, error) {
	var alpn []string
	if role != "cachenode" {
		alpn = []string{"h2"}
	}
	ctx := &tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		AlpnProtocols:                  alpn,
		TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sdsConfig(GatewayCertSecret)},
		ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
			DefaultValidationContext: &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
				SanType: tlsv3.SubjectAltNameMatcher_URI,
				Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "spiffe://" + g.TrustDomain + "/" + role + "/"}},
			}}},
			ValidationContextSdsSecretConfig: sdsConfig(PlatformCASecret),
		}},
	}}
	a, err := anypb.New(ctx)
	if err != nil {
		return nil, err
	}
	return &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: a}}, nil
}
