package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/portico-io/portico/internal/atomicfile"
	"github.com/portico-io/portico/internal/tlsfiles"
	"github.com/portico-io/portico/internal/xdsclient"
	"github.com/portico-io/portico/internal/xdscontract"
	ratelimitv1 "github.com/portico-io/portico/proto/portico/ratelimit/v1"
	"github.com/portico-io/portico/ratelimitsvc/rules"
)

// The xDS types ADS can subscribe to: Portico's rules (default), or the
// standard envoyproxy/ratelimit RateLimitConfig. The control plane compiles
// both from the same rules, so a replica subscribes to one, never both.
var RuleType = xdscontract.RateLimitRuleType

// ConfigType is envoyproxy/ratelimit's RateLimitConfig.
const ConfigType = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// NodeCluster is the node cluster ratelimitsvc announces.
const NodeCluster = xdscontract.NodeClusterRateLimit

const stateFile = "ratelimit-rules.pb"

// ADS subscribes to TypeURL over an ADS stream, delta or state of the world
// (the shared internal/xdsclient). Each response is validated as a whole: a good
// one is applied, written to StateDir and ACKed; a bad one is NACKed with
// its error and the previous rules stay. It reconnects with capped backoff
// until ctx is done.
type ADS struct {
	Addr   string
	NodeID string
	// TypeURL is RuleType (default) or ConfigType.
	TypeURL string
	// StateDir keeps the last good response; empty disables persistence.
	StateDir string
	Sink     Sink
	Logger   *slog.Logger
	// MaxBackoff caps the reconnect delay (default 5s).
	MaxBackoff time.Duration
	// OnResponse, when set, is called after each response is applied
	// (err nil, ACKed) or rejected (NACKed); a test hook.
	OnResponse func(version string, err error)
	// TLS is this workload's certificate (role ratelimit); required unless
	// InsecurePlaintext.
	TLS               *tlsfiles.Files
	InsecurePlaintext bool
	// MaxRecvMsgBytes bounds one response (default
	// xdsclient.DefaultMaxRecvMsgBytes).
	MaxRecvMsgBytes int
	// Protocol is xdsclient.ProtocolDelta (default) or ProtocolSotW.
	Protocol string
	// Health, when set, follows the stream's freshness (xdsclient.Health).
	Health *xdsclient.Health

	lastGood atomic.Pointer[string]
}

// Version is the last applied version ("" before any).
func (a *ADS) Version() string {
	if v := a.lastGood.Load(); v != nil {
		return *v
	}
	return ""
}

// LoadState applies the persisted last good response, if any. It reports
// whether one was applied.
func (a *ADS) LoadState() (bool, error) {
	if a.StateDir == "" {
		return false, nil
	}
	b, err := os.ReadFile(filepath.Join(a.StateDir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("source: read state: %w", err)
	}
	var resp discovery.DiscoveryResponse
	if err := proto.Unmarshal(b, &resp); err != nil {
		return false, fmt.Errorf("source: decode state: %w", err)
	}
	if resp.GetTypeUrl() != a.typeURL() {
		return false, fmt.Errorf("source: state dir holds %s, not %s", resp.GetTypeUrl(), a.typeURL())
	}
	if err := a.apply(&resp); err != nil {
		return false, fmt.Errorf("source: persisted rules: %w", err)
	}
	a.logger().Info("rate-limit rules loaded from the state dir", "version", resp.GetVersionInfo())
	return true, nil
}

// Run streams until ctx is done.
func (a *ADS) Run(ctx context.Context) error {
	maxB := a.MaxBackoff
	if maxB <= 0 {
		maxB = 5 * time.Second
	}
	var held map[string]string
	if v := a.Version(); v != "" {
		held = map[string]string{a.typeURL(): v}
	}
	return xdsclient.Run(ctx, xdsclient.Config{
		Addr:  a.Addr,
		Node:  &corev3.Node{Id: a.NodeID, Cluster: NodeCluster, UserAgentName: "portico-ratelimitsvc"},
		Types: []string{a.typeURL()}, Versions: held, Apply: a.applyResponse,
		MinBackoff: 100 * time.Millisecond, MaxBackoff: maxB,
		TLS: a.TLS, InsecurePlaintext: a.InsecurePlaintext, MaxRecvMsgBytes: a.MaxRecvMsgBytes, Protocol: a.Protocol, Health: a.Health, Logger: a.logger(),
	})
}

// applyResponse applies, persists and reports one response; an error
// NACKs it and the previous rules stay.
func (a *ADS) applyResponse(typeURL, version string, res []*anypb.Any) error {
	resp := &discovery.DiscoveryResponse{TypeUrl: typeURL, VersionInfo: version, Resources: res}
	err := a.apply(resp)
	if err == nil {
		a.persist(resp)
		a.logger().Info("rate-limit rules applied from xDS", "version", version, "rules", len(res))
	} else {
		rejected(a.Sink, rules.SourceXDS, err)
		a.logger().Error("rate-limit rules rejected (NACK); keeping the last good rules", "version", version, "err", err)
	}
	if a.OnResponse != nil {
		a.OnResponse(version, err)
	}
	return err
}

func (a *ADS) typeURL() string {
	if a.TypeURL == "" {
		return RuleType
	}
	return a.TypeURL
}

// apply decodes and validates every resource, then hands the set to Sink.
func (a *ADS) apply(resp *discovery.DiscoveryResponse) error {
	var rs []*rules.Rule
	for _, res := range resp.GetResources() {
		if res.GetTypeUrl() != a.typeURL() {
			return fmt.Errorf("%w: resource of type %s in a %s response", rules.ErrInvalid, res.GetTypeUrl(), a.typeURL())
		}
		switch a.typeURL() {
		case ConfigType:
			var c rlsconfv3.RateLimitConfig
			if err := res.UnmarshalTo(&c); err != nil {
				return fmt.Errorf("%w: %w", rules.ErrInvalid, err)
			}
			more, err := rules.FromRateLimitConfig(&c)
			if err != nil {
				return err
			}
			rs = append(rs, more...)
		default:
			var p ratelimitv1.RateLimitRule
			if err := res.UnmarshalTo(&p); err != nil {
				return fmt.Errorf("%w: %w", rules.ErrInvalid, err)
			}
			r, err := rules.FromProto(&p)
			if err != nil {
				return err
			}
			rs = append(rs, r)
		}
	}
	if err := a.Sink.Update(rules.SourceXDS, resp.GetVersionInfo(), rs); err != nil {
		return err
	}
	v := resp.GetVersionInfo()
	a.lastGood.Store(&v)
	return nil
}

// persist writes resp atomically (temp file, fsync, rename). A failure is
// logged: serving the new rules matters more than the copy on disk.
func (a *ADS) persist(resp *discovery.DiscoveryResponse) {
	if a.StateDir == "" {
		return
	}
	keep := &discovery.DiscoveryResponse{VersionInfo: resp.GetVersionInfo(), TypeUrl: resp.GetTypeUrl(), Resources: resp.GetResources()}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(keep)
	if err == nil {
		err = atomicfile.Write(filepath.Join(a.StateDir, stateFile), b, 0o600)
	}
	if err != nil {
		a.logger().Error("cannot persist rate-limit rules", "dir", a.StateDir, "err", err)
	}
}

func (a *ADS) logger() *slog.Logger {
	if a.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return a.Logger
}
