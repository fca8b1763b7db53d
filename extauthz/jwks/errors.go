package jwks

import "errors"

var (
	// ErrConfig is a bad Config.
	ErrConfig = errors.New("jwks: bad config")
	// ErrUnknownKID means no key has the token's kid, even after a refresh
	// (or a refresh was not allowed yet).
	ErrUnknownKID = errors.New("jwks: unknown kid")
	// ErrUnavailable means no key set has ever been fetched.
	ErrUnavailable = errors.New("jwks: no key set available")
	// ErrFetch wraps a failed fetch.
	ErrFetch = errors.New("jwks: fetch failed")
)
