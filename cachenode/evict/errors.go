package evict

import "errors"

// ErrUnknownPolicy is returned by Parse for a name that is not a policy.
var ErrUnknownPolicy = errors.New("evict: unknown eviction policy")
