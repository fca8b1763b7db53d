package rules

import "errors"

var (
	// ErrInvalid marks a rule or config file that cannot be used.
	ErrInvalid = errors.New("rules: invalid")
	// ErrUnsupported marks a valid rule using a feature this build lacks.
	ErrUnsupported = errors.New("rules: unsupported")
)
