package store

import "errors"

// Sentinel errors of the store.
var (
	ErrNotFound            = errors.New("store: not found")
	ErrPreconditionFailed  = errors.New("store: version does not match")
	ErrIdempotencyMismatch = errors.New("store: idempotency key reused with a different request")
	// ErrLeaseLost means the run's lease token moved on (reaped or
	// re-claimed): the caller's write changed nothing.
	ErrLeaseLost = errors.New("store: lease lost")
	ErrConflict  = errors.New("store: conflict")
	// ErrCancelled means the run was cancelled (POST /v1/runs/{id}:cancel
	// or concurrencyPolicy REPLACE) while the caller held its lease: stop
	// the attempt; the write changed nothing.
	ErrCancelled = errors.New("store: run cancelled")
	// ErrShardsLost means none of the runner's shard leases is current
	// (taken over or expired): it fired nothing and must rebalance.
	ErrShardsLost = errors.New("store: shard leases lost")
	// ErrFinished refuses to cancel a run that already ended.
	ErrFinished = errors.New("store: run already finished")
	// ErrPaused refuses a manual trigger of a paused job (the runner would
	// cancel the run).
	ErrPaused = errors.New("store: job is paused")
)

// NotHolderError refuses a remote worker's call on a run whose current
// lease it cannot prove it holds (see ClaimRemote). It matches ErrLeaseLost
// under errors.Is, and callers must answer it exactly as ErrLeaseLost: a
// worker is not to learn whether another worker's run exists. Reason
// (RefusedToken, RefusedIdentity) is for logs and metrics only.
type NotHolderError struct{ Reason string }

func (e *NotHolderError) Error() string { return "store: not the lease holder (" + e.Reason + ")" }

// Is makes a refusal an ErrLeaseLost.
func (e *NotHolderError) Is(target error) bool { return target == ErrLeaseLost }
