package namespace

import "errors"

// Sentinel errors. Config errors wrap ErrConfig with the field at fault.
var (
	ErrConfig       = errors.New("namespace: bad config")
	ErrUnknown      = errors.New("namespace: unknown namespace")
	ErrWrongSecret  = errors.New("namespace: wrong secret")
	ErrNoSecret     = errors.New("namespace: namespace has no secret")
	ErrRemoved      = errors.New("namespace: namespace removed")
	ErrRateOps      = errors.New("namespace: ops rate limited")
	ErrRateBytes    = errors.New("namespace: bandwidth rate limited")
	ErrBadByteValue = errors.New("namespace: bad byte size")
)
