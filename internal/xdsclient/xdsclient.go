// Package xdsclient is the xDS client of Portico's own services (extauthz,
// ratelimitsvc): one ADS stream over mutual TLS, incremental (delta, the
// default: one changed resource is sent alone) or state of the world,
// wildcard subscriptions to a fixed list of types, ACK of every response
// the applier accepts and NACK (with the applier's error as error_detail)
// of every response it rejects, so the server records why and the client
// keeps its last good state. It reconnects with jittered exponential
// backoff, reporting the versions it holds.
//
// Staleness is never silent: Health records when the client fell out of
// sync and why (a stream failing, a response over the receive limit, a
// NACK), for a readiness check and metrics; the last good state keeps
// serving meanwhile.
//
// The client presents its workload certificate (the control plane picks
// what it receives from the certificate's role) and accepts only a server
// with a controlplane identity. Persistence of the last good state belongs
// to the applier, which knows what "good" means.
//
// go-control-plane's pkg/client/sotw/v3 handles a single type per client,
// which does not fit a policy spread over three types on one ADS stream.
package xdsclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlsfiles"
)

// Defaults for Config.
const (
	DefaultMinBackoff = 250 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
	// DefaultMaxRecvMsgBytes bounds one response. State of the world sends
	// every resource of a type in one response, and so does delta's first
	// response of a stream (all 256 ApiKeyShards at once): gRPC's own 4 MiB
	// default is reached near 54,000 plain API keys (about 78 bytes each),
	// so the default leaves room for a million keys with a few scopes each
	// (a million plain keys take 78 MB). It equals the control plane's
	// default send limit (controlplane --xds-max-msg-bytes).
	DefaultMaxRecvMsgBytes = 256 << 20
)

// ApplyFunc applies the full state of one type. A non-nil error rejects it
// (NACK); the previous state of that type must then stay in force.
type ApplyFunc func(typeURL, version string, resources []*anypb.Any) error

// Config configures Run. Zero values take the defaults.
type Config struct {
	// Addr is the server's host:port (required).
	Addr string
	Node *corev3.Node
	// Types are subscribed to, wildcard, in this order.
	Types []string
	// Versions are the versions already held per type (a state restored
	// from disk), reported on the first subscription.
	Versions map[string]string
	Apply    ApplyFunc
	// MinBackoff and MaxBackoff bound the reconnect delay.
	MinBackoff, MaxBackoff time.Duration
	// TLS is this workload's certificate; required unless InsecurePlaintext.
	TLS *tlsfiles.Files
	// InsecurePlaintext talks to a plaintext control plane (debugging).
	InsecurePlaintext bool
	// MaxRecvMsgBytes is the largest response accepted (default
	// DefaultMaxRecvMsgBytes); the server's send limit must be at least as
	// large. A larger response fails the stream with ResourceExhausted.
	MaxRecvMsgBytes int
	DialOptions     []grpc.DialOption
	Logger          *slog.Logger
	// Protocol is ProtocolDelta (default) or ProtocolSotW.
	Protocol string
	// Health, when set, is kept up to date with the client's freshness
	// (a readiness check and metrics read it).
	Health *Health
}

// Run keeps a stream to the server until ctx is done; it returns nil then.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Addr == "" || cfg.Apply == nil || len(cfg.Types) == 0 {
		return fmt.Errorf("%w: Addr, Apply and Types are required", ErrConfig)
	}
	creds := insecure.NewCredentials()
	switch {
	case cfg.TLS != nil:
		creds = credentials.NewTLS(cfg.TLS.ClientConfig(identity.Policy{Roles: []identity.Role{identity.ControlPlane}}))
	case !cfg.InsecurePlaintext:
		return fmt.Errorf("%w: no TLS certificate for the xDS client, and plaintext not asked for", ErrConfig)
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.MinBackoff)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxRecvMsgBytes <= 0 {
		cfg.MaxRecvMsgBytes = DefaultMaxRecvMsgBytes
	}
	switch cfg.Protocol {
	case "":
		cfg.Protocol = ProtocolDelta
	case ProtocolDelta, ProtocolSotW:
	default:
		return fmt.Errorf("%w: Protocol %q: want %s or %s", ErrConfig, cfg.Protocol, ProtocolDelta, ProtocolSotW)
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(cfg.MaxRecvMsgBytes)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	}, cfg.DialOptions...)
	conn, err := grpc.NewClient(cfg.Addr, opts...)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	defer conn.Close()
	c := &client{cfg: cfg, ads: discovery.NewAggregatedDiscoveryServiceClient(conn), acked: maps.Clone(cfg.Versions),
		delta: map[string]map[string]*discovery.Resource{}}
	if c.acked == nil {
		c.acked = map[string]string{}
	}
	cfg.Health.subscribe(cfg.Types)
	backoff := cfg.MinBackoff
	for {
		session := c.session
		if cfg.Protocol == ProtocolDelta {
			session = c.deltaSession
		}
		progressed, err := session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		cfg.Health.streamFailed(err)
		if progressed {
			backoff = cfg.MinBackoff
		}
		// Full jitter keeps a fleet from reconnecting in lockstep.
		wait := backoff/2 + rand.N(backoff/2+1)
		cfg.Logger.Warn("xds client: stream ended, reconnecting; keeping the last good state", "addr", cfg.Addr, "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		backoff = min(backoff*2, cfg.MaxBackoff)
	}
}

type client struct {
	cfg Config
	ads discovery.AggregatedDiscoveryServiceClient
	// acked is the last accepted version per type (only the Run goroutine
	// touches it); it is what a NACK and a resubscription report.
	acked map[string]string
	// delta is, per type, the resources of the last accepted state with
	// their versions (delta protocol only; only the Run goroutine).
	delta map[string]map[string]*discovery.Resource
}

// session runs one stream. progressed says whether any response arrived.
func (c *client) session(ctx context.Context) (progressed bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.ads.StreamAggregatedResources(sctx)
	if err != nil {
		return false, err
	}
	// A stream that stays up without a response is in sync: the server
	// answers at once when the versions reported below are not current.
	if h := c.cfg.Health; h != nil {
		grace := time.AfterFunc(h.syncGrace(), func() {
			if sctx.Err() == nil {
				h.inSync()
			}
		})
		defer grace.Stop()
	}
	for _, t := range c.cfg.Types {
		if err := stream.Send(&discovery.DiscoveryRequest{Node: c.cfg.Node, TypeUrl: t, VersionInfo: c.acked[t]}); err != nil {
			return false, err
		}
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return progressed, err
		}
		progressed = true
		c.cfg.Health.received(proto.Size(resp))
		t := resp.GetTypeUrl()
		req := &discovery.DiscoveryRequest{TypeUrl: t, ResponseNonce: resp.GetNonce()}
		if aerr := c.cfg.Apply(t, resp.GetVersionInfo(), resp.GetResources()); aerr != nil {
			c.cfg.Logger.Warn("xds client: NACK", "type", t, "version", resp.GetVersionInfo(), "err", aerr)
			req.VersionInfo = c.acked[t]
			req.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: aerr.Error()}
			c.cfg.Health.rejected(t, resp.GetVersionInfo(), aerr)
		} else {
			c.cfg.Health.applied(t)
			c.acked[t] = resp.GetVersionInfo()
			req.VersionInfo = resp.GetVersionInfo()
		}
		if err := stream.Send(req); err != nil {
			return progressed, err
		}
	}
}

// ErrConfig is a Config missing Addr, Apply, Types or credentials.
var ErrConfig = errors.New("xdsclient: bad config")
