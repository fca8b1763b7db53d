package certsync

import "errors"

// Errors.
var (
	// ErrConfig is a Config Sync cannot work with.
	ErrConfig = errors.New("certsync: config")
	// ErrBadCA is a CA Secret that cannot issue for the trust domain. Sync
	// never replaces a CA; the operator decides.
	ErrBadCA = errors.New("certsync: unusable CA")
)
