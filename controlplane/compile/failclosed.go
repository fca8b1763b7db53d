package compile

import (
	"strings"

	"github.com/portico-io/portico/controlplane/spec"
)

// Rate-limit stages. Envoy's ratelimit filter only reads a route's
// rate_limits whose stage equals its own, so the stage picks which of the
// gateway's two ratelimit filters a route's descriptors go to:
//
//   - RateLimitStageOpen (FilterRateLimit): failure_mode_deny false. When
//     ratelimitsvc cannot be reached, or does not answer within
//     rateLimitTimeout, the request goes on unchecked.
//   - RateLimitStageClosed (FilterRateLimitFailClosed): failure_mode_deny
//     true. A missing or late answer (rateLimitClosedTimeout) is answered
//     with 503 (status_on_error; Envoy's default would be 500) and the
//     request never reaches the upstream.
//
// A route goes to the closed stage as a whole when any of its descriptors
// can reach an ENFORCE rule with failMode CLOSED (failClosed), so each
// request still makes one ShouldRateLimit call: one decision over all its
// buckets, one set of X-RateLimit headers. It mirrors what ratelimitsvc
// does itself when its store is down: a request with any ENFORCE CLOSED
// rule is denied, whatever its other rules say.
const (
	RateLimitStageOpen   = 0
	RateLimitStageClosed = 1
)

// failClosed reports whether route r has a descriptor that can reach an
// ENFORCE rule with failMode CLOSED in the gateway's rate-limit domain.
//
// The control plane only knows the rules it serves: a CLOSED rule that
// exists only in ratelimitsvc's own config files does not move a route.
func (c *compiler) failClosed(r *spec.Route) bool {
	for _, name := range spec.SortedKeys(c.cfg.RateLimitRules) {
		rule := c.cfg.RateLimitRules[name]
		if rule.FailMode != spec.FailClosed || rule.Mode == spec.ModeShadow || rule.Domain != c.opts.RateLimitDomain {
			continue
		}
		for _, rl := range r.RateLimits {
			if reaches(rl.Descriptors, rule.Descriptors) {
				return true
			}
		}
	}
	return false
}

// usesFailClosed reports whether any route fails closed; without one the
// fail-closed filter stays out of the chain.
func (c *compiler) usesFailClosed() bool {
	for _, r := range c.cfg.Routes {
		if c.failClosed(r) {
			return true
		}
	}
	return false
}

// rateLimitStage is the stage route r's rate_limits are compiled with.
func (c *compiler) rateLimitStage(r *spec.Route) uint32 {
	if c.failClosed(r) {
		return RateLimitStageClosed
	}
	return RateLimitStageOpen
}

// reaches reports whether some request descriptor compiled from route
// entries can end at the node of rule descriptors in ratelimitsvc's table
// (package ratelimitsvc/rules: entries walked in order, a limit applies
// only where the last entry lands, so lengths must agree). A fromHeader
// entry is dropped when the header is absent (skip_if_absent); constants
// and the remote address always produce their entry.
//
// Values known only at request time (headers, the client address) are
// assumed to match any rule value, and a more specific rule that would
// take the request away from a CLOSED one is not looked for: the answer
// errs towards failing closed.
func reaches(route []spec.RateLimitDescriptorEntry, rule []spec.RuleDescriptor) bool {
	if len(rule) == 0 {
		for _, e := range route {
			if e.FromHeader == "" {
				return false
			}
		}
		return true
	}
	if len(route) == 0 {
		return false
	}
	e := route[0]
	if e.FromHeader != "" && reaches(route[1:], rule) {
		return true
	}
	return entryMeets(e, rule[0]) && reaches(route[1:], rule[1:])
}

// entryMeets reports whether route entry e can match rule entry d.
func entryMeets(e spec.RateLimitDescriptorEntry, d spec.RuleDescriptor) bool {
	if e.Key != d.Key {
		return false
	}
	switch {
	case d.Value == "", e.FromHeader != "", e.RemoteAddress:
		return true
	case d.Key == "remote_address" && strings.Contains(d.Value, "/"):
		return true // a CIDR: a constant address is rare enough not to parse
	case strings.HasSuffix(d.Value, "*"):
		return strings.HasPrefix(e.Value, strings.TrimSuffix(d.Value, "*"))
	}
	return e.Value == d.Value
}
