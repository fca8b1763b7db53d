package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/store"
)

// Error codes of the error envelope.
const (
	CodeInvalid                = "invalid"
	CodeNotFound               = "not_found"
	CodeConflict               = "conflict"
	CodePreconditionFailed     = "precondition_failed"
	CodePreconditionRequired   = "precondition_required"
	CodeIdempotencyKeyRequired = "idempotency_key_required"
	CodeIdempotencyKeyReused   = "idempotency_key_reused"
	CodeBodyTooLarge           = "body_too_large"
	CodeInvalidParameter       = "invalid_parameter"
	CodeInternal               = "internal"
	CodeSecretsUnavailable     = "secrets_unavailable"
)

// Error is an API error with its HTTP status, rendered as
// {"error": {"code", "message", "field"}}.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func badParam(field, msg string) error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidParameter, Message: msg, Field: field}
}

// toAPIError maps an error to what the client sees; ok is false for
// unexpected errors (a 500 revealing nothing) so the caller logs them.
func toAPIError(err error) (*Error, bool) {
	var (
		e  *Error
		fe *jobspec.FieldError
		mb *http.MaxBytesError
	)
	switch {
	case errors.As(err, &e):
		return e, true
	case errors.As(err, &fe):
		return &Error{Status: http.StatusUnprocessableEntity, Code: CodeInvalid, Message: fe.Message, Field: fe.Field}, true
	case errors.As(err, &mb):
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeBodyTooLarge, Message: "request body is larger than the limit"}, true
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
	case errors.Is(err, context.Canceled):
		return &Error{Status: 499, Code: "canceled", Message: "request canceled"}, true
	}
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"}, false
}

func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e, ok := toAPIError(err)
	if !ok {
		a.cfg.Logger.Error("api: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	_ = writeJSON(w, e.Status, map[string]*Error{"error": e})
}
