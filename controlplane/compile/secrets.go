package compile

import (
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/portico-io/portico/controlplane/spec"
)

// defaultALPN is offered by HTTPS listeners without their own list.
var defaultALPN = []string{"h2", "http/1.1"}

var tlsVersions = map[string]tlsv3.TlsParameters_TlsProtocol{
	"":         tlsv3.TlsParameters_TLSv1_2,
	spec.TLS12: tlsv3.TlsParameters_TLSv1_2,
	spec.TLS13: tlsv3.TlsParameters_TLSv1_3,
}

// sdsConfig points Envoy at a secret served over the same ADS stream.
func sdsConfig(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: adsConfigSource()}
}

// CheckConfig reports what spec validation cannot know because it depends
// on the options: a listener or redis proxy on the port of the built-in
// ingress_http. The
// store runs it on every change so that such a config is never accepted
// (*spec.FieldError, like every validation failure).
func CheckConfig(cfg *spec.Config, opts Options) error {
	opts = opts.withDefaults()
	for _, name := range spec.SortedKeys(cfg.Listeners) {
		if l := cfg.Listeners[name]; l.Port == opts.ListenerPort {
			return &spec.FieldError{Field: "listeners/" + name + ": port", Code: spec.CodeConflict,
				Message: fmt.Sprintf("port %d is the built-in listener %s's", l.Port, ListenerName)}
		}
	}
	for _, name := range spec.SortedKeys(cfg.RedisProxies) {
		if p := cfg.RedisProxies[name]; p.Listen.Port == opts.ListenerPort {
			return &spec.FieldError{Field: "redis-proxies/" + name + ": listen.port", Code: spec.CodeConflict,
				Message: fmt.Sprintf("port %d is the built-in listener %s's", p.Listen.Port, ListenerName)}
		}
		if p := cfg.RedisProxies[name]; p.Cluster.PlatformTLS && opts.GatewayIdentity == nil {
			return &spec.FieldError{Field: "redis-proxies/" + name + ": cluster.platformTLS", Code: spec.CodeInvalid,
				Message: "this control plane has no gateway identity to present (start it with --gateway-tls-cert-file, --gateway-tls-key-file and --gateway-tls-ca-file)"}
		}
	}
	return nil
}

// secrets compiles the SDS secrets the listeners and clusters refer to, and
// only those: an unreferenced secret (a certificate staged for rotation, say)
// is not sent to any gateway. Inline private keys are unsealed here, so the
// only place they exist in clear is the snapshot served to Envoy.
func (c *compiler) secrets() ([]Resource, error) {
	var out []Resource
	for _, name := range c.cfg.ReferencedSecrets() {
		s, ok := c.cfg.Secrets[name]
		if !ok {
			return nil, fmt.Errorf("%w: secret %q does not exist", ErrInvalidConfig, name)
		}
		sec := &tlsv3.Secret{Name: name}
		switch s.Type {
		case spec.SecretTLS:
			tc := &tlsv3.TlsCertificate{}
			if f := s.Files; f != nil {
				tc.CertificateChain = fileSource(f.CertificateChain)
				tc.PrivateKey = fileSource(f.PrivateKey)
			} else {
				key, err := c.privateKey(s)
				if err != nil {
					return nil, err
				}
				tc.CertificateChain = bytesSource([]byte(s.Certificate))
				tc.PrivateKey = bytesSource(key)
			}
			sec.Type = &tlsv3.Secret_TlsCertificate{TlsCertificate: tc}
		case spec.SecretCA:
			vc := &tlsv3.CertificateValidationContext{}
			if f := s.Files; f != nil {
				vc.TrustedCa = fileSource(f.TrustedCA)
			} else {
				vc.TrustedCa = bytesSource([]byte(s.CA))
			}
			sec.Type = &tlsv3.Secret_ValidationContext{ValidationContext: vc}
		default:
			return nil, fmt.Errorf("%w: secrets/%s: type %q", ErrInvalidConfig, name, s.Type)
		}
		out = append(out, sec)
	}
	if g := c.opts.GatewayIdentity; g != nil {
		out = append(out, g.secrets()...)
	}
	return out, nil
}

// privateKey returns an inline tls secret's key in clear. A Config from the
// store holds it sealed; a plain PrivateKey (a config built in memory) is
// used as is.
func (c *compiler) privateKey(s *spec.Secret) ([]byte, error) {
	if s.PrivateKey != "" {
		return []byte(s.PrivateKey), nil
	}
	if c.opts.Unseal == nil {
		return nil, fmt.Errorf("%w: secrets/%s has a sealed private key but no secret key is configured to open it", ErrUnseal, s.Name)
	}
	key, err := c.opts.Unseal(s.SealedPrivateKey)
	if err != nil {
		// err comes from package seal and never holds the plaintext.
		return nil, fmt.Errorf("%w: secrets/%s: %w", ErrUnseal, s.Name, err)
	}
	return key, nil
}

func fileSource(path string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: path}}
}

func bytesSource(b []byte) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b}}
}

// userListeners compiles the operator's listeners: each serves
// ingress_routes with ingress_http's filter chain (its own stat prefix, and
// its own header and body caps and pre-auth limit when set), behind TLS
// when configured.
func (c *compiler) userListeners() ([]Resource, error) {
	var out []Resource
	for _, name := range spec.SortedKeys(c.cfg.Listeners) {
		l := c.cfg.Listeners[name]
		headersKB, bodyBytes := c.opts.MaxRequestHeadersKB, c.opts.DefaultMaxRequestBytes
		if l.MaxRequestHeadersKB > 0 {
			headersKB = l.MaxRequestHeadersKB
		}
		if l.MaxRequestBytes > 0 {
			bodyBytes = l.MaxRequestBytes
		}
		h, err := c.hcm(false, headersKB, bodyBytes, c.preAuthLimit(l))
		if err != nil {
			return nil, err
		}
		h.StatPrefix = name
		a, err := anyOf(h)
		if err != nil {
			return nil, err
		}
		chain := &listenerv3.FilterChain{Filters: []*listenerv3.Filter{{
			Name:       hcmFilterName,
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: a},
		}}}
		if l.TLS != nil {
			ts, err := downstreamTLS(l.TLS)
			if err != nil {
				return nil, fmt.Errorf("listeners/%s: %w", name, err)
			}
			chain.TransportSocket = ts
		}
		addr := l.Address
		if addr == "" {
			addr = DefaultListenerAddress
		}
		out = append(out, &listenerv3.Listener{
			Name:         name,
			Address:      socketAddress(addr, l.Port),
			FilterChains: []*listenerv3.FilterChain{chain},
		})
	}
	return out, nil
}

func downstreamTLS(t *spec.ListenerTLS) (*corev3.TransportSocket, error) {
	minVersion, ok := tlsVersions[t.MinVersion]
	if !ok {
		return nil, fmt.Errorf("%w: tls.minVersion %q", ErrInvalidConfig, t.MinVersion)
	}
	alpn := t.ALPN
	if len(alpn) == 0 {
		alpn = defaultALPN
	}
	common := &tlsv3.CommonTlsContext{
		TlsParams:     &tlsv3.TlsParameters{TlsMinimumProtocolVersion: minVersion},
		AlpnProtocols: alpn,
	}
	for _, name := range t.Certificates {
		common.TlsCertificateSdsSecretConfigs = append(common.TlsCertificateSdsSecretConfigs, sdsConfig(name))
	}
	if t.ClientCA != "" {
		common.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{
			ValidationContextSdsSecretConfig: sdsConfig(t.ClientCA),
		}
	}
	ctx := &tlsv3.DownstreamTlsContext{CommonTlsContext: common}
	if t.RequireClientCert {
		ctx.RequireClientCertificate = wrapperspb.Bool(true)
	}
	a, err := anyOf(ctx)
	if err != nil {
		return nil, err
	}
	return &corev3.TransportSocket{
		Name:       tlsTransportSocket,
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: a},
	}, nil
}
