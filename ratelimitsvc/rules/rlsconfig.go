package rules

import (
	"strings"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
)

// FromRateLimitConfig converts the standard xDS RateLimitConfig (the
// envoyproxy/ratelimit file format as a resource) into fixed-window rules,
// exactly as the same YAML file would load.
func FromRateLimitConfig(c *rlsconfv3.RateLimitConfig) ([]*Rule, error) {
	f := yamlFile{Domain: c.GetDomain(), Descriptors: descriptorsFromProto(c.GetDescriptors())}
	return f.rules("RateLimitConfig "+c.GetName(), SourceXDS, "xds-config:")
}

func descriptorsFromProto(ds []*rlsconfv3.RateLimitDescriptor) []yamlDescriptor {
	out := make([]yamlDescriptor, 0, len(ds))
	for _, d := range ds {
		y := yamlDescriptor{Key: d.GetKey(), Value: d.GetValue(), ShadowMode: d.GetShadowMode(),
			DetailedMetric: d.GetDetailedMetric(), Descriptors: descriptorsFromProto(d.GetDescriptors())}
		if p := d.GetRateLimit(); p != nil {
			rl := &yamlRateLimit{Unit: strings.ToLower(p.GetUnit().String()), RequestsPerUnit: p.GetRequestsPerUnit(),
				Unlimited: p.GetUnlimited(), Name: p.GetName()}
			for _, r := range p.GetReplaces() {
				rl.Replaces = append(rl.Replaces, yamlReplace{Name: r.GetName()})
			}
			y.RateLimit = rl
		}
		out = append(out, y)
	}
	return out
}
