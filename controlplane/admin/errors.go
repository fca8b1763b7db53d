package admin

import (
	"errors"
	"net/http"

	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/controlplane/store"
	"github.com/portico-io/portico/internal/apierror"
)

// Error codes of the error envelope (validation errors use spec's codes:
// required, invalid, unknown_reference, conflict, in_use).
const (
	CodeMalformedJSON          = "malformed_json"
	CodeNotFound               = apierror.CodeNotFound
	CodeAlreadyExists          = "already_exists"
	CodePreconditionFailed     = apierror.CodePreconditionFailed
	CodePreconditionRequired   = apierror.CodePreconditionRequired
	CodeIdempotencyKeyRequired = apierror.CodeIdempotencyKeyRequired
	CodeIdempotencyKeyReused   = apierror.CodeIdempotencyKeyReused
	CodeBodyTooLarge           = apierror.CodeBodyTooLarge
	CodeUnsupportedMediaType   = "unsupported_media_type"
	CodeInvalidParameter       = apierror.CodeInvalidParameter
	CodeInternal               = apierror.CodeInternal
)

// Error is an API error with its HTTP status; it is rendered as
// {"error": {"code", "message", "field"}} (internal/apierror).
type Error = apierror.Error

// toAPIError maps an endpoint's error to what the client sees. Unknown
// errors become a 500 whose message reveals nothing; ok is false for them
// so the caller logs the cause.
func toAPIError(err error) (apiErr *Error, ok bool) {
	if e, ok := apierror.Common(err); ok {
		return e, true
	}
	var fe *spec.FieldError
	switch {
	case errors.As(err, &fe):
		return &Error{Status: http.StatusUnprocessableEntity, Code: fe.Code, Message: fe.Message, Field: fe.Field}, true
	case errors.Is(err, store.ErrNotFound):
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "not found"}, true
	case errors.Is(err, store.ErrAlreadyExists):
		return &Error{Status: http.StatusConflict, Code: CodeAlreadyExists, Message: "a resource with this name exists; use PUT or PATCH with If-Match to change it", Field: "name"}, true
	case errors.Is(err, store.ErrPreconditionFailed):
		return &Error{Status: http.StatusPreconditionFailed, Code: CodePreconditionFailed, Message: "If-Match does not match the current ETag; GET the resource and retry"}, true
	case errors.Is(err, store.ErrIdempotencyMismatch):
		return &Error{Status: http.StatusUnprocessableEntity, Code: CodeIdempotencyKeyReused, Message: "this Idempotency-Key was used for a different request"}, true
	}
	return apierror.Internal(), false
}

func errMissingIfMatch() error {
	return &Error{Status: http.StatusPreconditionRequired, Code: CodePreconditionRequired,
		Message: "If-Match with the resource's ETag is required"}
}

func errMissingIdempotencyKey() error {
	return &Error{Status: http.StatusPreconditionRequired, Code: CodeIdempotencyKeyRequired,
		Message: "Idempotency-Key header is required on POST"}
}

func badParam(field, msg string) error { return apierror.BadParam(field, msg) }
