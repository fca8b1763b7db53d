// Package xdsclient is a small state-of-the-world ADS client: one stream,
// wildcard subscriptions to a fixed list of types, ACK of every response
// the applier accepts and NACK (with the applier's error as error_detail)
// of every response it rejects, so the server records why and the client
// keeps its last good state. It reconnects with jittered exponential
// backoff.
//
// go-control-plane's pkg/client/sotw/v3 handles a single type per client,
// which does not fit a policy spread over three types on one ADS stream.
package xdsclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/anypb"
)

// Defaults for Config.
const (
	DefaultMinBackoff = 250 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
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
	Apply ApplyFunc
	// MinBackoff and MaxBackoff bound the reconnect delay.
	MinBackoff, MaxBackoff time.Duration
	DialOptions            []grpc.DialOption
	Logger                 *slog.Logger
}

// Run keeps a stream to the server until ctx is done; it returns nil then.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Addr == "" || cfg.Apply == nil || len(cfg.Types) == 0 {
		return ErrConfig
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
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	}, cfg.DialOptions...)
	conn, err := grpc.NewClient(cfg.Addr, opts...)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	defer conn.Close()
	c := &client{cfg: cfg, ads: discovery.NewAggregatedDiscoveryServiceClient(conn), acked: map[string]string{}}
	backoff := cfg.MinBackoff
	for {
		progressed, err := c.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if progressed {
			backoff = cfg.MinBackoff
		}
		// Full jitter keeps a fleet from reconnecting in lockstep.
		wait := backoff/2 + rand.N(backoff/2+1)
		cfg.Logger.Warn("extauthz: xDS stream ended, reconnecting", "addr", cfg.Addr, "err", err, "in", wait)
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
}

// session runs one stream. progressed says whether any response arrived.
func (c *client) session(ctx context.Context) (progressed bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.ads.StreamAggregatedResources(sctx)
	if err != nil {
		return false, err
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
		t := resp.GetTypeUrl()
		req := &discovery.DiscoveryRequest{TypeUrl: t, ResponseNonce: resp.GetNonce()}
		if aerr := c.cfg.Apply(t, resp.GetVersionInfo(), resp.GetResources()); aerr != nil {
			c.cfg.Logger.Warn("extauthz: NACK", "type", t, "version", resp.GetVersionInfo(), "err", aerr)
			req.VersionInfo = c.acked[t]
			req.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: aerr.Error()}
		} else {
			c.acked[t] = resp.GetVersionInfo()
			req.VersionInfo = resp.GetVersionInfo()
		}
		if err := stream.Send(req); err != nil {
			return progressed, err
		}
	}
}

// ErrConfig is a Config missing Addr, Apply or Types.
var ErrConfig = errors.New("xdsclient: bad config")
