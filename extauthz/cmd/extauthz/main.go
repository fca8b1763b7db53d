// Command extauthz runs Portico's Envoy ext_authz service: gRPC
// envoy.service.auth.v3.Authorization on :18100 and /metrics, /healthz,
// /readyz on :18101, with its policy from the control plane over xDS.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/portico-io/portico/extauthz"
	"github.com/portico-io/portico/extauthz/jwks"
	"github.com/portico-io/portico/internal/envflag"
	"github.com/portico-io/portico/internal/logging"
	"github.com/portico-io/portico/internal/tlsfiles"
	"github.com/portico-io/portico/internal/tracing"
	"github.com/portico-io/portico/internal/xdsclient"
)

func main() {
	fs := flag.NewFlagSet("extauthz", flag.ExitOnError)
	grpcAddr := envflag.String(fs, "grpc-addr", "PORTICO_EXTAUTHZ_GRPC_ADDR", extauthz.DefaultGRPCAddr, "ext_authz gRPC listen address")
	httpAddr := envflag.String(fs, "http-addr", "PORTICO_EXTAUTHZ_HTTP_ADDR", extauthz.DefaultHTTPAddr, "metrics and health HTTP listen address")
	xdsAddr := envflag.String(fs, "xds-addr", "PORTICO_XDS_ADDR", extauthz.DefaultXDSAddr, "control plane xDS address (empty: persisted policy only)")
	nodeID := envflag.String(fs, "node-id", "PORTICO_NODE_ID", "", "xDS node id (default extauthz-<hostname>)")
	stateDir := envflag.String(fs, "state-dir", "PORTICO_EXTAUTHZ_STATE_DIR", extauthz.DefaultStateDir, "directory holding the last applied policy")
	secretsDir := envflag.String(fs, "secrets-dir", "PORTICO_EXTAUTHZ_SECRETS_DIR", "", "directory of secrets providers reference by name (introspection client secrets), one file each")
	refresh := envflag.Duration(fs, "jwks-min-refresh-interval", "PORTICO_EXTAUTHZ_JWKS_MIN_REFRESH_INTERVAL", jwks.DefaultMinRefreshInterval, "least time between two JWKS fetches of one provider")
	cacheSize := envflag.Uint(fs, "token-cache-size", "PORTICO_EXTAUTHZ_TOKEN_CACHE_SIZE", 100000, "verified-token cache entries")
	maxRecv := envflag.Uint(fs, "xds-max-recv-msg-bytes", "PORTICO_XDS_MAX_RECV_MSG_BYTES", xdsclient.DefaultMaxRecvMsgBytes, "largest xDS response accepted (every API-key shard arrives in one)")
	staleAfter := envflag.Duration(fs, "xds-stale-after", "PORTICO_XDS_STALE_AFTER", xdsclient.DefaultStaleAfter, "how long the policy may be out of sync with the control plane before /readyz fails (decisions continue on the last good policy)")
	protocol := envflag.String(fs, "xds-protocol", "PORTICO_XDS_PROTOCOL", xdsclient.ProtocolDelta, "xDS protocol: delta (incremental: a key change sends one API-key shard) or sotw (state of the world: every shard on every change)")
	logFormat := envflag.String(fs, "log-format", "PORTICO_LOG_FORMAT", "json", "log format: json or text")
	logLevel := envflag.String(fs, "log-level", "PORTICO_LOG_LEVEL", "info", "log level")
	tlsFlags := tlsfiles.RegisterFlags(fs)
	traceFlags := tracing.RegisterFlags(fs, extauthz.ServiceName)
	plaintext := envflag.Bool(fs, "insecure-plaintext", "PORTICO_INSECURE_PLAINTEXT", false, "talk to a plaintext control plane (debugging only)")
	_ = fs.Parse(os.Args[1:])

	log, err := logging.New(os.Stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	cfg := extauthz.Config{
		GRPCAddr: *grpcAddr, HTTPAddr: *httpAddr, XDSAddr: *xdsAddr, NodeID: *nodeID, StateDir: *stateDir, SecretsDir: *secretsDir,
		MinJWKSRefreshInterval: *refresh, TokenCacheSize: int(*cacheSize), Logger: log,
		TLS: tlsFlags.Config(), InsecurePlaintext: *plaintext, Tracing: traceFlags.Config(), XDSMaxRecvMsgBytes: int(*maxRecv), XDSStaleAfter: *staleAfter, XDSProtocol: *protocol,
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := extauthz.Run(ctx, cfg); err != nil {
		log.Error("extauthz: exiting", "err", err)
		os.Exit(1)
	}
}
