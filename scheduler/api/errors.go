package api

import (
	"errors"
	"net/http"

	"github.com/portico-io/portico/internal/apierror"
	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/store"
)

// Error codes of the error envelope.
const (
	CodeInvalid                = "invalid"
	CodeNotFound               = apierror.CodeNotFound
	CodeConflict               = "conflict"
	CodePreconditionFailed     = apierror.CodePreconditionFailed
	CodePreconditionRequired   = apierror.CodePreconditionRequired
	CodeIdempotencyKeyRequired = apierror.CodeIdempotencyKeyRequired
	CodeIdempotencyKeyReused   = apierror.CodeIdempotencyKeyReused
	CodeBodyTooLarge           = apierror.CodeBodyTooLarge
	CodeInvalidParameter       = apierror.CodeInvalidParameter
	CodeInternal               = apierror.CodeInternal
	CodeSecretsUnavailable     = "secrets_unavailable"
)

// Error is an API error with its HTTP status, rendered as
// {"error": {"code", "message", "field"}} (internal/apierror).
type Error = apierror.Error

func badParam(field, msg string) error { return apierror.BadParam(field, msg) }

// toAPIError maps an error to what the client sees; ok is false for
// unexpected errors (a 500 revealing nothing) so the caller logs them.
func toAPIError(err error) (*Error, bool) {
	if e, ok := apierror.Common(err); ok {
		return e, true
	}
	var fe *jobspec.FieldError
	switch {
	case errors.As(err, &fe):
		return &Error{Status: http.StatusUnprocessableEntity, Code: CodeInvalid, Message: fe.Message, Field: fe.Field}, true
	case errors.Is(err, store.ErrNotFound):
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no such job"}, true
	case errors.Is(err, store.ErrPreconditionFailed):
		return &Error{Status: http.StatusPreconditionFailed, Code: CodePreconditionFailed, Message: "If-Match does not match the job's current version; GET it and retry", Field: "If-Match"}, true
	case errors.Is(err, store.ErrIdempotencyMismatch):
		return &Error{Status: http.StatusUnprocessableEntity, Code: CodeIdempotencyKeyReused, Message: "this Idempotency-Key was used for a different request", Field: "Idempotency-Key"}, true
	case errors.Is(err, store.ErrPaused):
		return &Error{Status: http.StatusConflict, Code: CodeConflict, Message: "the job is paused; resume it before triggering"}, true
	case errors.Is(err, store.ErrConflict):
		return &Error{Status: http.StatusConflict, Code: CodeConflict, Message: "a run for this slot exists; retry"}, true
	}
	return apierror.Internal(), false
}

func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e, ok := toAPIError(err)
	if !ok {
		a.cfg.Logger.Error("api: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	_ = writeJSON(w, e.Status, apierror.Body(e))
}
