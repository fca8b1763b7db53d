// Package rules is the rate-limit rule model and its matcher: rules from
// envoyproxy/ratelimit YAML files and from Portico's xDS RateLimitRule
// resources compile into one immutable Table per version, which the request
// path reads through an atomic pointer without taking a lock.
package rules

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Algorithm selects how a rule counts.
type Algorithm int

const (
	// TokenBucket refills Limit tokens per Window up to Limit+Burst (the default).
	TokenBucket Algorithm = iota
	// SlidingWindow is the sliding window counter: at most Limit in any
	// trailing Window, estimated from two aligned windows' counts; no burst.
	SlidingWindow
	// FixedWindow counts at most Limit per aligned Window (envoyproxy/ratelimit semantics).
	FixedWindow
)

func (a Algorithm) String() string {
	switch a {
	case TokenBucket:
		return "TOKEN_BUCKET"
	case SlidingWindow:
		return "SLIDING_WINDOW"
	case FixedWindow:
		return "FIXED_WINDOW"
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

// MarshalText makes /config readable.
func (a Algorithm) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// Mode is ENFORCE or SHADOW (count and log would-be denials, allow them).
type Mode int

const (
	Enforce Mode = iota
	Shadow
)

// MarshalText makes /config readable.
func (m Mode) MarshalText() ([]byte, error) {
	if m == Shadow {
		return []byte("SHADOW"), nil
	}
	return []byte("ENFORCE"), nil
}

// FailMode says what a rule decides when its backend cannot answer.
type FailMode int

const (
	// FailOpen allows (the default): a limiter outage must not be an API outage.
	FailOpen FailMode = iota
	// FailClosed denies: for login, OTP and money movement.
	FailClosed
)

// MarshalText makes /config readable.
func (f FailMode) MarshalText() ([]byte, error) {
	if f == FailClosed {
		return []byte("CLOSED"), nil
	}
	return []byte("OPEN"), nil
}

// Entry is one descriptor entry. In a rule, an empty Value matches any value
// (one bucket per distinct value) and a Value ending in "*" matches by prefix
// (one bucket per value, or one for all values when Shared: envoyproxy's
// share_threshold).
type Entry struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Shared bool   `json:"shared,omitempty"`
}

// Source names where a rule came from; it orders ties between sources.
const (
	SourceXDS  = "xds"
	SourceFile = "file"
)

// maxUnits bounds capacity × window (in ms) so bucket arithmetic stays exact
// in float64 (Redis Lua) as well as int64 (memory backend).
const maxUnits = 1 << 53

// Rule is one limit. A Rule is immutable once it is in a Table.
type Rule struct {
	// ID is unique within a Table and names the rule's buckets.
	ID          string        `json:"id"`
	Name        string        `json:"name,omitempty"`
	Source      string        `json:"source"`
	Domain      string        `json:"domain"`
	Descriptors []Entry       `json:"descriptors"`
	Limit       uint32        `json:"limit"`
	Window      time.Duration `json:"window"`
	Burst       uint32        `json:"burst,omitempty"`
	Algorithm   Algorithm     `json:"algorithm"`
	Mode        Mode          `json:"mode"`
	FailMode    FailMode      `json:"failMode"`
	// Unlimited rules match (and so shadow less specific ones) but never limit.
	Unlimited bool `json:"unlimited,omitempty"`
	// NoLimit marks a descriptor declared without a limit: envoyproxy/ratelimit's
	// entry with no rate_limit and no nested descriptors, its documented
	// whitelist. Its node is indexed, so it shadows less specific siblings as
	// any rule does, but it is never a candidate there: a request that ends
	// at it gets no limit (not even an unlimited one) and replaces nothing.
	NoLimit    bool     `json:"noLimit,omitempty"`
	HighVolume bool     `json:"highVolume,omitempty"`
	Tenant     string   `json:"tenant,omitempty"`
	Priority   int32    `json:"priority,omitempty"`
	Replaces   []string `json:"replaces,omitempty"`
}

// Capacity is the most tokens a bucket holds: the steady Limit plus Burst.
func (r *Rule) Capacity() uint64 { return uint64(r.Limit) + uint64(r.Burst) }

// Validate reports the first problem that makes r unusable.
func (r *Rule) Validate() error {
	if r.Domain == "" {
		return fmt.Errorf("%w: %s: domain is required", ErrInvalid, r.ID)
	}
	if len(r.Descriptors) == 0 {
		return fmt.Errorf("%w: %s: at least one descriptor is required", ErrInvalid, r.ID)
	}
	for i, d := range r.Descriptors {
		if d.Key == "" {
			return fmt.Errorf("%w: %s: descriptors[%d].key is required", ErrInvalid, r.ID, i)
		}
		if isCIDR(d) {
			if _, err := netip.ParsePrefix(d.Value); err != nil {
				return fmt.Errorf("%w: %s: descriptors[%d]: %s: %w", ErrInvalid, r.ID, i, RemoteAddressKey, err)
			}
		}
	}
	// A limit that replaced itself would never apply when it matched
	// (envoyproxy/ratelimit refuses it at load for the same reason).
	if r.Name != "" && slices.Contains(r.Replaces, r.Name) {
		return fmt.Errorf("%w: %s: replaces its own name %q", ErrInvalid, r.ID, r.Name)
	}
	if r.Unlimited || r.NoLimit {
		return nil
	}
	if r.Algorithm == SlidingWindow && r.Burst > 0 {
		return fmt.Errorf("%w: %s: burst applies to TOKEN_BUCKET only, not SLIDING_WINDOW", ErrInvalid, r.ID)
	}
	if r.Algorithm != TokenBucket && r.Algorithm != FixedWindow && r.Algorithm != SlidingWindow {
		return fmt.Errorf("%w: %s: unknown algorithm %d", ErrInvalid, r.ID, r.Algorithm)
	}
	if r.Window < time.Millisecond || r.Window%time.Millisecond != 0 {
		return fmt.Errorf("%w: %s: window must be a whole number of milliseconds, at least 1ms", ErrInvalid, r.ID)
	}
	if float64(r.Capacity())*float64(r.Window.Milliseconds()) >= maxUnits {
		return fmt.Errorf("%w: %s: (limit+burst) × window in ms must stay below 2^53", ErrInvalid, r.ID)
	}
	// The sliding estimate weighs two windows' counts in 1/window-ms units.
	if r.Algorithm == SlidingWindow && 2*float64(r.Limit)*float64(r.Window.Milliseconds()) >= maxUnits {
		return fmt.Errorf("%w: %s: 2 × limit × window in ms must stay below 2^53", ErrInvalid, r.ID)
	}
	return nil
}

func (r *Rule) path() string {
	var b strings.Builder
	for i, d := range r.Descriptors {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(d.Key)
		if d.Value != "" {
			b.WriteByte('=')
			b.WriteString(d.Value)
		}
	}
	return b.String()
}

// MarshalJSON shows the window as a duration string ("1m0s") in /config.
func (r *Rule) MarshalJSON() ([]byte, error) {
	type plain Rule
	return json.Marshal(struct {
		*plain
		Window string `json:"window,omitempty"`
	}{(*plain)(r), r.Window.String()})
}
