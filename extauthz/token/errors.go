package token

import "errors"

// Verification failures. Each maps to one bounded reason code.
var (
	ErrMalformed   = errors.New("token: malformed")
	ErrAlgorithm   = errors.New("token: algorithm not allowed")
	ErrSignature   = errors.New("token: bad signature")
	ErrIssuer      = errors.New("token: wrong issuer")
	ErrAudience    = errors.New("token: wrong audience")
	ErrExpired     = errors.New("token: expired")
	ErrNotYetValid = errors.New("token: not yet valid")
)
