package bucket

import "errors"

// ErrBackend wraps every failure to reach or run the bucket store; callers
// apply each rule's fail mode.
var ErrBackend = errors.New("bucket: backend unavailable")

// ErrBreakerOpen: the shard's circuit breaker refused the call without
// contacting Redis. It is always wrapped together with ErrBackend.
var ErrBreakerOpen = errors.New("bucket: circuit breaker open")
