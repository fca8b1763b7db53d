package spec

import (
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("spec: invalid resource")

// Error codes carried by FieldError.
const (
	CodeRequired   = "required"
	CodeInvalid    = "invalid"
	CodeUnknownRef = "unknown_reference"
	CodeConflict   = "conflict"
	CodeInUse      = "in_use"
)

// FieldError is a validation failure naming the offending field with a JSON
// path ("endpoints[0].port", "routes/echo: cluster").
type FieldError struct {
	Field   string
	Code    string
	Message string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: %s", e.Field, e.Message)
}

// Unwrap lets errors.Is(err, ErrInvalid) succeed.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func fieldErr(field, code, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Code: code, Message: fmt.Sprintf(format, args...)}
}
