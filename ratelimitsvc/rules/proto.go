package rules

import (
	"fmt"

	ratelimitv1 "github.com/portico-io/portico/proto/portico/ratelimit/v1"
)

// FromProto converts one xDS RateLimitRule resource and validates it.
func FromProto(p *ratelimitv1.RateLimitRule) (*Rule, error) {
	if p.GetName() == "" {
		return nil, fmt.Errorf("%w: rule without a name", ErrInvalid)
	}
	r := &Rule{
		ID:         "xds:" + p.GetName(),
		Name:       p.GetName(),
		Source:     SourceXDS,
		Domain:     p.GetDomain(),
		Limit:      p.GetLimit(),
		Window:     p.GetWindow().AsDuration(),
		Burst:      p.GetBurst(),
		HighVolume: p.GetHighVolume(),
		Tenant:     p.GetTenant(),
		Priority:   p.GetPriority(),
	}
	switch p.GetAlgorithm() {
	case ratelimitv1.Algorithm_TOKEN_BUCKET:
		r.Algorithm = TokenBucket
	case ratelimitv1.Algorithm_FIXED_WINDOW:
		r.Algorithm = FixedWindow
	case ratelimitv1.Algorithm_SLIDING_WINDOW:
		r.Algorithm = SlidingWindow
	default:
		return nil, fmt.Errorf("%w: %s: unknown algorithm %v", ErrInvalid, r.ID, p.GetAlgorithm())
	}
	if p.GetMode() == ratelimitv1.Mode_SHADOW {
		r.Mode = Shadow
	}
	if p.GetFailMode() == ratelimitv1.FailMode_CLOSED {
		r.FailMode = FailClosed
	}
	for _, d := range p.GetDescriptors() {
		r.Descriptors = append(r.Descriptors, Entry{Key: d.GetKey(), Value: d.GetValue()})
	}
	// envoyproxy/ratelimit's formats read requests_per_unit: 0 as a ban;
	// in Portico's own rule a zero is an unset field, not a ban.
	if r.Limit == 0 && !r.Unlimited {
		return nil, fmt.Errorf("%w: %s: limit must be greater than 0", ErrInvalid, r.ID)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r, nil
}
