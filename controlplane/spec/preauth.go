package spec

import "errors"

// MaxPreAuthRequestsPerSecond bounds PreAuthLimit's rate and burst: far
// above any one client's legitimate rate, low enough that Envoy's 32-bit
// token counts cannot overflow.
const MaxPreAuthRequestsPerSecond = 1_000_000

// PreAuthLimit is a per-client-address token bucket a gateway listener
// applies before authentication, so a flood of guessed credentials from one
// address is refused by Envoy before it costs extauthz or the identity
// provider anything. The address is the one Envoy trusts (the peer, or the
// X-Forwarded-For hop the control plane's trusted-hops setting names),
// never a header the client controls.
//
// Buckets are per gateway process and live in it: the limit keeps working
// when ratelimitsvc is down, and N gateways admit up to N times the rate.
type PreAuthLimit struct {
	// Disabled turns the limit off for the listener.
	Disabled bool `json:"disabled,omitempty"`
	// RequestsPerSecond is the refill rate of each address's bucket.
	RequestsPerSecond uint32 `json:"requestsPerSecond,omitempty"`
	// Burst is the bucket's size (default RequestsPerSecond): how many
	// requests an idle address may send at once.
	Burst uint32 `json:"burst,omitempty"`
}

// Effective returns the rate and bucket size, and whether the limit is on.
func (p PreAuthLimit) Effective() (rps, burst uint32, on bool) {
	if p.Disabled || p.RequestsPerSecond == 0 {
		return 0, 0, false
	}
	burst = p.Burst
	if burst == 0 {
		burst = p.RequestsPerSecond
	}
	return p.RequestsPerSecond, burst, true
}

// Validate checks the limit; field names are relative to it.
func (p PreAuthLimit) Validate() error {
	switch {
	case p.Disabled && (p.RequestsPerSecond != 0 || p.Burst != 0):
		return fieldErr("disabled", CodeInvalid, "and requestsPerSecond/burst are exclusive")
	case p.Disabled:
		return nil
	case p.RequestsPerSecond == 0:
		return fieldErr("requestsPerSecond", CodeRequired, "is required (or disabled: true)")
	case p.RequestsPerSecond > MaxPreAuthRequestsPerSecond:
		return fieldErr("requestsPerSecond", CodeInvalid, "must be at most %d", MaxPreAuthRequestsPerSecond)
	case p.Burst > MaxPreAuthRequestsPerSecond:
		return fieldErr("burst", CodeInvalid, "must be at most %d", MaxPreAuthRequestsPerSecond)
	case p.Burst != 0 && p.Burst < p.RequestsPerSecond:
		// A bucket smaller than one second's refill would make the real
		// rate depend on how Envoy refills (whole seconds or continuously).
		return fieldErr("burst", CodeInvalid, "must be at least requestsPerSecond")
	}
	return nil
}

// prefixed puts prefix before a FieldError's field (a nested value's
// error, reported from its parent).
func prefixed(prefix string, err error) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fieldErr(prefix+fe.Field, fe.Code, "%s", fe.Message)
	}
	return err
}
