package rollout

import "errors"

// Sentinel errors returned (possibly wrapped) by the controller. Invalid
// specs are *spec.FieldError values instead (errors.As), which also match
// spec.ErrInvalid.
var (
	// ErrRolloutRunning: Start was called while another rollout runs.
	ErrRolloutRunning = errors.New("rollout: a rollout is already running")
	// ErrNotFound: no rollout has that id.
	ErrNotFound = errors.New("rollout: not found")
	// ErrIdempotencyMismatch: StartOnce got a key already used for a
	// different request.
	ErrIdempotencyMismatch = errors.New("rollout: idempotency key used for a different request")
	// ErrNotRunning: Abort named a rollout that has already ended.
	ErrNotRunning = errors.New("rollout: not running")
)
