package store

import "errors"

// Sentinel errors returned (possibly wrapped) by the store. Validation
// failures are *spec.FieldError values instead (errors.As), which also match
// spec.ErrInvalid.
var (
	// ErrNotFound: no such resource, version or audit entry.
	ErrNotFound = errors.New("store: not found")
	// ErrAlreadyExists: a create named a resource that exists.
	ErrAlreadyExists = errors.New("store: already exists")
	// ErrPreconditionFailed: an update or delete carried an ETag that is not
	// the resource's current one.
	ErrPreconditionFailed = errors.New("store: precondition failed")
	// ErrIdempotencyMismatch: an idempotency key was reused for a different
	// request (another method, path or body).
	ErrIdempotencyMismatch = errors.New("store: idempotency key reused with a different request")
	// ErrNoChange: every change equals the current state; no version was made.
	ErrNoChange = errors.New("store: no change")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
)
