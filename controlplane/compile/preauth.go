package compile

import (
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	localratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/portico-io/portico/controlplane/spec"
)

// PreAuthTrackedAddresses is how many client addresses each listener's
// pre-auth limit keeps a bucket for (Envoy's max_dynamic_descriptors, an
// LRU; its default of 20 would let any client that waits for 20 others
// start over with a full bucket). An address pushed out comes back with a
// full bucket, so rotating through more addresses than this defeats the
// limit; that many addresses defeat any per-address limit anyway. Each
// bucket costs a few hundred bytes of gateway memory.
const PreAuthTrackedAddresses = 16384

// preAuthRuntimeKey prefixes the Envoy runtime keys that can switch the
// limit off on one gateway in an emergency (<key>.enabled, .enforced: a
// percentage, default 100).
const preAuthRuntimeKey = "portico.preauth_limit"

// preAuthLimit is the listener's pre-auth limit: its own setting, else the
// control plane's (Options.PreAuthLimit, already defaulted).
func (c *compiler) preAuthLimit(l *spec.Listener) spec.PreAuthLimit {
	if l != nil && l.PreAuthLimit != nil {
		return *l.PreAuthLimit
	}
	return c.opts.PreAuthLimit
}

// preAuthFilter is the local_ratelimit filter that runs first in the chain:
// one token bucket per client address (a wildcard remote_address
// descriptor fed by the filter's own remote_address action, so the routes'
// rate_limits, which belong to the ratelimit filters, play no part).
// Requests over the limit get 429 with Retry-After from Envoy itself, with
// no network call, before ext_authz runs.
//
// The filter's default bucket only serves requests that produced no
// address (none do on TCP listeners); always_consume_default_token_bucket
// is off so it is not a gateway-wide limit on everyone else.
func preAuthFilter(rps, burst uint32) *localratelimitv3.LocalRateLimit {
	bucket := func() *typev3.TokenBucket {
		return &typev3.TokenBucket{MaxTokens: burst, TokensPerFill: wrapperspb.UInt32(rps), FillInterval: durationpb.New(time.Second)}
	}
	all := func(what string) *corev3.RuntimeFractionalPercent {
		return &corev3.RuntimeFractionalPercent{
			DefaultValue: &typev3.FractionalPercent{Numerator: 100, Denominator: typev3.FractionalPercent_HUNDRED},
			RuntimeKey:   preAuthRuntimeKey + "." + what,
		}
	}
	return &localratelimitv3.LocalRateLimit{
		StatPrefix:     "preauth",
		TokenBucket:    bucket(),
		FilterEnabled:  all("enabled"),
		FilterEnforced: all("enforced"),
		Descriptors: []*ratelimitcommonv3.LocalRateLimitDescriptor{{
			Entries:     []*ratelimitcommonv3.RateLimitDescriptor_Entry{{Key: "remote_address"}},
			TokenBucket: bucket(),
		}},
		RateLimits: []*routev3.RateLimit{{Actions: []*routev3.RateLimit_Action{{
			ActionSpecifier: &routev3.RateLimit_Action_RemoteAddress_{RemoteAddress: &routev3.RateLimit_Action_RemoteAddress{}},
		}}}},
		AlwaysConsumeDefaultTokenBucket: wrapperspb.Bool(false),
		MaxDynamicDescriptors:           wrapperspb.UInt32(PreAuthTrackedAddresses),
		EnableRetryAfterHeader:          true,
	}
}
