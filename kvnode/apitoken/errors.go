package apitoken

import "errors"

var (
	// ErrNotFound: no token with that id.
	ErrNotFound = errors.New("apitoken: no such token")
	// ErrExists: the id is taken (a random 64-bit id: in practice never).
	ErrExists = errors.New("apitoken: token id exists")
	// ErrCorrupt: a stored token does not decode; lookups of it fail
	// (authn answers 503) rather than guess.
	ErrCorrupt = errors.New("apitoken: corrupt token record")
)
