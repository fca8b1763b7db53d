package client

import "errors"

var (
	// ErrNotFound is returned by a loader for a key the origin does not
	// have; Get caches it for Options.NegativeTTL and returns it.
	ErrNotFound = errors.New("cachenode/client: not found")
	// ErrOverloaded is returned when the loader's bulkhead is full and no
	// stale value is held (or Options.Overload is FailFast): the origin is
	// protected rather than queued on.
	ErrOverloaded = errors.New("cachenode/client: origin overloaded")
	// ErrCacheUnavailable wraps the cache error that made Get fall back to
	// the loader; it is only returned by calls that have no loader
	// (Invalidate).
	ErrCacheUnavailable = errors.New("cachenode/client: cache unavailable")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("cachenode/client: closed")
)
