package coordinator

import "errors"

var (
	// ErrUnavailable means too few replicas were alive to attempt the
	// request: nothing was written.
	ErrUnavailable = errors.New("kvnode: unavailable")
	// ErrTimeout means the request was attempted but too few replicas
	// answered in time: a write may or may not have been applied, and will
	// spread through hints, read repair and anti-entropy if it was.
	ErrTimeout = errors.New("kvnode: timeout")
	// ErrIdempotencyMismatch means an Idempotency-Key was reused for a
	// different request.
	ErrIdempotencyMismatch = errors.New("kvnode: idempotency key reused for a different request")
	// ErrBadLevel is an unknown consistency level.
	ErrBadLevel = errors.New("kvnode: unknown consistency level")
)
