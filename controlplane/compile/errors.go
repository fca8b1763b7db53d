package compile

import "errors"

var (
	// ErrInvalidConfig means the input config fails spec validation or
	// violates an assumption of the compiler.
	ErrInvalidConfig = errors.New("compile: invalid config")
	// ErrOptions means the Options are unusable (bad address, out of range).
	ErrOptions = errors.New("compile: invalid options")
	// ErrInvalidOutput means a compiled resource failed its proto validation
	// or the snapshot is inconsistent: a compiler bug, never the caller's.
	ErrInvalidOutput = errors.New("compile: invalid output")
	// ErrUnseal means an inline secret's sealed private key cannot be
	// opened: no Options.Unseal, or another key sealed it.
	ErrUnseal = errors.New("compile: cannot unseal a secret")
)
