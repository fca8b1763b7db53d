// Command controlplane runs Portico's control plane: the admin REST API
// (:18080) and the xDS server (:18000) backed by PostgreSQL.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/controlplane/seal"
	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/controlplane/xds"
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
	preAuthRPS := envflag.Uint(fs, "preauth-limit-rps", "PORTICO_PREAUTH_LIMIT_RPS", compile.DefaultPreAuthRequestsPerSecond, "requests per second each client address may send to ingress_http (and to listeners without their own preAuthLimit) before authentication, per gateway; 0 = no limit")
	preAuthBurst := envflag.Uint(fs, "preauth-limit-burst", "PORTICO_PREAUTH_LIMIT_BURST", 0, "bucket size of the pre-auth limit: requests an idle client address may send at once (at least the rate; 0 = the rate)")
	tracing := envflag.String(fs, "tracing-collector", "PORTICO_TRACING_COLLECTOR", "", "OpenTelemetry collector host:port (OTLP gRPC) the gateways export traces to; empty = no tracing")
	sample := envflag.Uint(fs, "tracing-sample-percent", "PORTICO_TRACING_SAMPLE_PERCENT", 1, "percent of requests without a sampling decision that are traced")
	deployMode := envflag.String(fs, "deploy-mode", "PORTICO_DEPLOY_MODE", "auto", "auto: every new config version goes to every node; manual: only rollouts move nodes")
	keyFile := envflag.String(fs, "secret-key-file", "PORTICO_SECRET_KEY_FILE", "", "file holding the base64 32-byte key that seals TLS private keys at rest (or set PORTICO_SECRET_KEY)")
	logFormat := envflag.String(fs, "log-format", "PORTICO_LOG_FORMAT", "json", "log format: json or text")
	logLevel := envflag.String(fs, "log-level", "PORTICO_LOG_LEVEL", "info", "log level")
	tlsFlags := tlsfiles.RegisterFlags(fs)
	authFlags := authn.RegisterFlags(fs)
	gwCert := envflag.String(fs, "gateway-tls-cert-file", "PORTICO_GATEWAY_TLS_CERT_FILE", "", "the gateways' workload certificate, as a path on the gateway hosts: Envoy calls extauthz and ratelimitsvc over mTLS with it (empty: plaintext)")
	gwKey := envflag.String(fs, "gateway-tls-key-file", "PORTICO_GATEWAY_TLS_KEY_FILE", "", "its key, a path on the gateway hosts")
	gwCA := envflag.String(fs, "gateway-tls-ca-file", "PORTICO_GATEWAY_TLS_CA_FILE", "", "the platform CA bundle, a path on the gateway hosts")
	loopIdP := envflag.Bool(fs, "idp-allow-loopback-http", "PORTICO_IDP_ALLOW_LOOPBACK_HTTP", false, "accept JWT providers whose JWKS or introspection endpoint is plain http on a loopback host, marking them allowInsecureLoopback (a development machine's IdP; never in production)")
	maxMsg := envflag.Uint(fs, "xds-max-msg-bytes", "PORTICO_XDS_MAX_MSG_BYTES", xds.DefaultMaxMsgBytes, "largest xDS message sent or received; every resource of a type goes in one state-of-the-world response and in the first delta response (a million API keys: about 78 MB plus scopes); keep the clients' --xds-max-recv-msg-bytes at least as large")
	plaintext := envflag.Bool(fs, "insecure-plaintext", "PORTICO_INSECURE_PLAINTEXT", false, "serve xDS without TLS, trusting what clients claim to be (debugging only)")
	_ = fs.Parse(os.Args[1:])

	log, err := logging.New(os.Stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	cfg.AdminAddr, cfg.XDSAddr, cfg.DatabaseURL, cfg.Logger = *admin, *xdsAddr, *db, log
	cfg.DeployMode = *deployMode
	cfg.XDSMaxMsgBytes = int(*maxMsg)
	cfg.Compile.ExtAuthzAddress, cfg.Compile.RateLimitAddress = *extauthz, *ratelimit
	cfg.Compile.ListenerPort, cfg.Compile.XFFNumTrustedHops = uint32(*listenerPort), uint32(*xff)
	cfg.Compile.TracingCollector, cfg.Compile.TracingSamplePercent = *tracing, float64(*sample)
	if cfg.Compile.PreAuthLimit, err = preAuthLimit(*preAuthRPS, *preAuthBurst); err != nil {
		log.Error("controlplane: --preauth-limit-rps/--preauth-limit-burst", "err", err)
		os.Exit(2)
	}

	cfg.TLS, cfg.InsecurePlaintext, cfg.IdPAllowLoopbackHTTP = tlsFlags.Config(), *plaintext, *loopIdP
	cfg.AdminTokenFile, cfg.AdminHosts = *authFlags.TokenFile, authFlags.HostList()
	if cfg.OperatorJWT, err = authFlags.JWT(func(r string) error { return authz.CheckRoles([]string{r}) }); err != nil {
		log.Error("controlplane: operator JWTs", "err", err)
		os.Exit(2)
	}
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

// preAuthLimit is ingress_http's pre-auth limit from its flags (rate 0:
// off).
func preAuthLimit(rps, burst uint) (spec.PreAuthLimit, error) {
	if rps == 0 {
		return spec.PreAuthLimit{Disabled: true}, nil
	}
	if rps > spec.MaxPreAuthRequestsPerSecond || burst > spec.MaxPreAuthRequestsPerSecond {
		return spec.PreAuthLimit{}, fmt.Errorf("at most %d", spec.MaxPreAuthRequestsPerSecond)
	}
	p := spec.PreAuthLimit{RequestsPerSecond: uint32(rps), Burst: uint32(burst)}
	return p, p.Validate()
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
