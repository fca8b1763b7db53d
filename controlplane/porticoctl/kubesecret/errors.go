package kubesecret

import (
	"errors"
	"fmt"
	"net/http"
)

// Errors. An *APIError matches the sentinel of its status code with
// errors.Is.
var (
	// ErrConfig is a client that cannot be set up or a call it refuses.
	ErrConfig = errors.New("kubesecret: config")
	// ErrNotFound is a Secret that does not exist (404).
	ErrNotFound = errors.New("kubesecret: not found")
	// ErrExists is a Create of a name already taken (409 AlreadyExists).
	ErrExists = errors.New("kubesecret: already exists")
	// ErrConflict is an Update of a Secret changed since it was read (409).
	ErrConflict = errors.New("kubesecret: conflict")
	// ErrForbidden is a call the service account's Role does not allow
	// (401/403).
	ErrForbidden = errors.New("kubesecret: forbidden")
)

// APIError is a call the API server refused.
type APIError struct {
	Method, Path string
	Code         int
	// Reason and Message come from the metav1.Status body, when there is one.
	Reason, Message string
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Code)
	}
	return fmt.Sprintf("kubesecret: %s %s: %d %s: %s", e.Method, e.Path, e.Code, e.Reason, msg)
}

// Is maps status codes onto the sentinels.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Code == http.StatusNotFound
	case ErrExists:
		return e.Code == http.StatusConflict && e.Reason == "AlreadyExists"
	case ErrConflict:
		return e.Code == http.StatusConflict && e.Reason != "AlreadyExists"
	case ErrForbidden:
		return e.Code == http.StatusForbidden || e.Code == http.StatusUnauthorized
	}
	return false
}
