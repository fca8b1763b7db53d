// Command controlplane runs Portico's control plane: the admin REST API
// (:18080) and the xDS server (:18000) backed by PostgreSQL.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/controlplane/seal"
	"github.com/portico-io/portico/extauthz/jwks"
	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/internal/envflag"
	"github.com/portico-io/portico/internal/logging"
	"github.com/portico-io/portico/internal/tlsfiles"
)

func main() {
	fs := flag.NewFlagSet("controlplane", flag.ExitOnError)
	var cfg controlplane.Config
	admin := envflag.String(fs, "admin-addr", "PORTICO_ADMIN_ADDR", controlplane.DefaultAdminAddr, "admin REST listen address")
	xdsAddr := envflag.String(fs, "xds-addr", "PORTICO_XDS_LISTEN_ADDR", controlplane.DefaultXDSAddr, "xDS gRPC listen address")
	db := envflag.String(fs, "database-url", "PORTICO_DATABASE_URL", controlplane.DefaultDatabaseURL, "PostgreSQL URL")
	extauthz := envflag.String(fs, "extauthz-addr", "PORTICO_EXTAUTHZ_ADDR", "127.0.0.1:18100", "extauthz gRPC address Envoy calls")
	ratelimit := envflag.String(fs, "ratelimit-addr", "PORTICO_RATELIMIT_ADDR", "127.0.0.1:18200", "ratelimitsvc gRPC address Envoy calls")
	listenerPort := envflag.Uint(fs, "envoy-listener-port", "PORTICO_ENVOY_LISTENER_PORT", 10000, "port of Envoy's ingress_http listener")
	xff := envflag.Uint(fs, "xff-trusted-hops", "PORTICO_XFF_TRUSTED_HOPS", 0, "X-Forwarded-For hops in front of Envoy that are trusted")
	tracing := envflag.String(fs, "tracing-collector", "PORTICO_TRACING_COLLECTOR", "", "OpenTelemetry collector host:port (OTLP gRPC) the gateways export traces to; empty = no tracing")
	sample := envflag.Uint(fs, "tracing-sample-percent", "PORTICO_TRACING_SAMPLE_PERCENT", 1, "percent of requests without a sampling decision that are traced")
	deployMode := envflag.String(fs, "deploy-mode", "PORTICO_DEPLOY_MODE", "auto", "auto: every new config version goes to every node; manual: only rollouts move nodes")
	keyFile := envflag.String(fs, "secret-key-file", "PORTICO_SECRET_KEY_FILE", "", "file holding the base64 32-byte key that seals TLS private keys at rest (or set PORTICO_SECRET_KEY)")
	logFormat := envflag.String(fs, "log-format", "PORTICO_LOG_FORMAT", "json", "log format: json or text")
	logLevel := envflag.String(fs, "log-level", "PORTICO_LOG_LEVEL", "info", "log level")
	tlsFlags := tlsfiles.RegisterFlags(fs)
	gwCert := envflag.String(fs, "gateway-tls-cert-file", "PORTICO_GATEWAY_TLS_CERT_FILE", "", "the gateways' workload certificate, as a path on the gateway hosts: Envoy calls extauthz and ratelimitsvc over mTLS with it (empty: plaintext)")
	gwKey := envflag.String(fs, "gateway-tls-key-file", "PORTICO_GATEWAY_TLS_KEY_FILE", "", "its key, a path on the gateway hosts")
	gwCA := envflag.String(fs, "gateway-tls-ca-file", "PORTICO_GATEWAY_TLS_CA_FILE", "", "the platform CA bundle, a path on the gateway hosts")
	plaintext := envflag.Bool(fs, "insecure-plaintext", "PORTICO_INSECURE_PLAINTEXT", false, "serve xDS without TLS, trusting what clients claim to be (debugging only)")
	tokenFile := envflag.String(fs, "admin-token-file", "PORTICO_ADMIN_TOKEN_FILE", "", "bootstrap admin token file: made (0600) and printed once on the first start, accepted from then on")
	adminHosts := envflag.String(fs, "admin-hosts", "PORTICO_ADMIN_HOSTS", "localhost,127.0.0.1,::1", "comma-separated host names clients reach the admin API by (others get 421)")
	oidcIssuer := envflag.String(fs, "oidc-issuer", "PORTICO_OIDC_ISSUER", "", "operators' IdP: the iss of the JWTs the admin API accepts (empty: no JWTs)")
	oidcAud := envflag.String(fs, "oidc-audiences", "PORTICO_OIDC_AUDIENCES", "portico-admin", "comma-separated audiences; a JWT must name one")
	oidcJWKS := envflag.String(fs, "oidc-jwks-url", "PORTICO_OIDC_JWKS_URL", "", "the IdP's JWKS URL")
	oidcAlgs := envflag.String(fs, "oidc-algorithms", "PORTICO_OIDC_ALGORITHMS", "RS256,ES256", "comma-separated signature algorithms accepted (pinned)")
	oidcClaim := envflag.String(fs, "oidc-roles-claim", "PORTICO_OIDC_ROLES_CLAIM", "groups", "the claim whose values map to roles")
	oidcMap := envflag.String(fs, "oidc-role-map", "PORTICO_OIDC_ROLE_MAP", "", "comma-separated claim value=role pairs, e.g. platform-admins=admin,sre=viewer")
	_ = fs.Parse(os.Args[1:])

	log, err := logging.New(os.Stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	cfg.AdminAddr, cfg.XDSAddr, cfg.DatabaseURL, cfg.Logger = *admin, *xdsAddr, *db, log
	cfg.DeployMode = *deployMode
	cfg.Compile.ExtAuthzAddress, cfg.Compile.RateLimitAddress = *extauthz, *ratelimit
	cfg.Compile.ListenerPort, cfg.Compile.XFFNumTrustedHops = uint32(*listenerPort), uint32(*xff)
	cfg.Compile.TracingCollector, cfg.Compile.TracingSamplePercent = *tracing, float64(*sample)

	cfg.TLS, cfg.InsecurePlaintext = tlsFlags.Config(), *plaintext
	cfg.AdminTokenFile = *tokenFile
	if *oidcIssuer != "" {
		if cfg.OperatorJWT, err = operatorJWT(*oidcIssuer, *oidcAud, *oidcJWKS, *oidcAlgs, *oidcClaim, *oidcMap); err != nil {
			log.Error("controlplane: operator JWTs", "err", err)
			os.Exit(2)
		}
	}
	cfg.AdminHosts = splitList(*adminHosts)
	if *gwCert != "" || *gwKey != "" || *gwCA != "" {
		cfg.Compile.GatewayIdentity = &compile.GatewayIdentity{CertFile: *gwCert, KeyFile: *gwKey, CAFile: *gwCA, TrustDomain: *tlsFlags.TrustDomain}
	}
	if cfg.SecretKey, err = secretKey(*keyFile); err != nil {
		log.Error("controlplane: secret key", "err", err)
		os.Exit(2)
	}
	if cfg.SecretKey == nil {
		log.Warn("controlplane: no secret key configured; TLS secrets with inline private keys are refused (use files)")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := controlplane.Run(ctx, cfg); err != nil {
		log.Error("controlplane: exiting", "err", err)
		os.Exit(1)
	}
}

// secretKey reads the sealing key from the key file, or from
// PORTICO_SECRET_KEY (base64) when no file is given; nil when neither is set.
func secretKey(file string) ([]byte, error) {
	if file != "" {
		return seal.ReadKeyFile(file)
	}
	if v := os.Getenv("PORTICO_SECRET_KEY"); v != "" {
		return seal.ParseKey(v)
	}
	return nil, nil
}

// operatorJWT builds the admin API's JWT verification from the --oidc-*
// flags; the JWKS is fetched and cached by extauthz's key source.
func operatorJWT(issuer, audiences, jwksURL, algs, claim, roleMap string) (*authn.JWTConfig, error) {
	if jwksURL == "" {
		return nil, errors.New("--oidc-jwks-url is required with --oidc-issuer")
	}
	keys, err := jwks.New(jwks.Config{URI: jwksURL})
	if err != nil {
		return nil, err
	}
	mapping := map[string][]string{}
	for _, pair := range splitList(roleMap) {
		value, role, ok := strings.Cut(pair, "=")
		if !ok || value == "" {
			return nil, fmt.Errorf("--oidc-role-map: %q is not value=role", pair)
		}
		if err := authz.CheckRoles([]string{role}); err != nil {
			return nil, fmt.Errorf("--oidc-role-map: %w", err)
		}
		mapping[value] = append(mapping[value], role)
	}
	return &authn.JWTConfig{Issuer: issuer, Audiences: splitList(audiences), Algorithms: splitList(algs), Keys: keys,
		RolesClaim: claim, RoleMapping: mapping}, nil
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
