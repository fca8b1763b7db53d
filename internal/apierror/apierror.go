// Package apierror is the platform's JSON error envelope for REST APIs
// (the control plane's admin API, the scheduler's jobs API):
//
//	{"error": {"code": "...", "message": "...", "field": "..."}}
//
// An endpoint returns an *Error for what the client did wrong; Common maps
// the failures every API shares, and anything else is a 500 whose message
// reveals nothing (the caller logs the cause).
package apierror

import (
	"context"
	"errors"
	"net/http"
)

// Codes every API uses. APIs add their own.
const (
	CodeNotFound               = "not_found"
	CodePreconditionFailed     = "precondition_failed"
	CodePreconditionRequired   = "precondition_required"
	CodeIdempotencyKeyRequired = "idempotency_key_required"
	CodeIdempotencyKeyReused   = "idempotency_key_reused"
	CodeBodyTooLarge           = "body_too_large"
	CodeInvalidParameter       = "invalid_parameter"
	CodeInternal               = "internal"
	CodeCanceled               = "canceled"
)

// StatusClientClosed is nginx's 499: the client went away, so it never
// sees it; it keeps such requests apart in metrics and logs.
const StatusClientClosed = 499

// Error is an API error with its HTTP status.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// BadParam is a 400 for a malformed query parameter or header.
func BadParam(field, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidParameter, Message: msg, Field: field}
}

// Internal is the 500 every unexpected error becomes.
func Internal() *Error {
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"}
}

// Common maps what every API shares: an *Error as it is, a body over the
// limit (http.MaxBytesReader) to 413, a canceled request to 499. ok is
// false for anything else.
func Common(err error) (e *Error, ok bool) {
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &e):
		return e, true
	case errors.As(err, &mb):
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeBodyTooLarge, Message: "request body is larger than the limit"}, true
	case errors.Is(err, context.Canceled):
		return &Error{Status: StatusClientClosed, Code: CodeCanceled, Message: "request canceled"}, true
	}
	return nil, false
}

// Body is e in the envelope, ready for JSON encoding.
func Body(e *Error) any { return map[string]*Error{"error": e} }
