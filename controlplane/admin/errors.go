package admin

import (
	"context"
	"errors"
	"net/http"

	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/controlplane/store"
)

// Error codes of the error envelope (validation errors use spec's codes:
// required, invalid, unknown_reference, conflict, in_use).
const (
	CodeMalformedJSON          = "malformed_json"
	CodeNotFound               = "not_found"
	CodeAlreadyExists          = "already_exists"
	CodePreconditionFailed     = "precondition_failed"
	CodePreconditionRequired   = "precondition_required"
	CodeIdempotencyKeyRequired = "idempotency_key_required"
	CodeIdempotencyKeyReused   = "idempotency_key_reused"
	CodeBodyTooLarge           = "body_too_large"
	CodeUnsupportedMediaType   = "unsupported_media_type"
	CodeInvalidParameter       = "invalid_parameter"
	CodeInternal               = "internal"
)

// Error is an API error with its HTTP status; it is rendered as
// {"error": {"code", "message", "field"}}.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// toAPIError maps an endpoint's error to what the client sees. Unknown
// errors become a 500 whose message reveals nothing; ok is false for them
// so the caller logs the cause.
func toAPIError(err error) (apiErr *Error, ok bool) {
	var (
		e  *Error
		fe *spec.FieldError
		mb *http.MaxBytesError
	)
	switch {
	case errors.As(err, &e):
		return e, true
	case errors.As(err, &fe):
		return &Error{Status: http.StatusUnprocessableEntity, Code: fe.Code, Message: fe.Message, Field: fe.Field}, true
	case errors.As(err, &mb):
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeBodyTooLarge, Message: "request body is larger than the limit"}, true
	case errors.Is(err, store.ErrNotFound):
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "not found"}, true
	case errors.Is(err, store.ErrAlreadyExists):
		return &Error{Status: http.StatusConflict, Code: CodeAlreadyExists, Message: "a resource with this name exists; use PUT or PATCH with If-Match to change it", Field: "name"}, true
	case errors.Is(err, store.ErrPreconditionFailed):
		return &Error{Status: http.StatusPreconditionFailed, Code: CodePreconditionFailed, Message: "If-Match does not match the current ETag; GET the resource and retry"}, true
	case errors.Is(err, store.ErrIdempotencyMismatch):
		return &Error{Status: http.StatusUnprocessableEntity, Code: CodeIdempotencyKeyReused, Message: "this Idempotency-Key was used for a different request"}, true
	case errors.Is(err, context.Canceled):
		// The client went away; 499 is nginx's convention, never seen by it.
		return &Error{Status: 499, Code: "canceled", Message: "request canceled"}, true
	}
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"}, false
}

func errMissingIfMatch() error {
	return &Error{Status: http.StatusPreconditionRequired, Code: CodePreconditionRequired,
		Message: "If-Match with the resource's ETag is required"}
}

func errMissingIdempotencyKey() error {
	return &Error{Status: http.StatusPreconditionRequired, Code: CodeIdempotencyKeyRequired,
		Message: "Idempotency-Key header is required on POST"}
}

func badParam(field, msg string) error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidParameter, Message: msg, Field: field}
}
