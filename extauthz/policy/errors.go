package policy

import "errors"

var (
	// ErrInvalid marks a resource that fails validation (the xDS client
	// NACKs it).
	ErrInvalid = errors.New("policy: invalid resource")
	// ErrUnknownType marks a resource type a Policy is not built from.
	ErrUnknownType = errors.New("policy: unknown resource type")
	// ErrBadJWKS marks a JWK set that cannot be parsed or holds a key that
	// cannot verify.
	ErrBadJWKS = errors.New("policy: bad JWK set")
	// ErrNoState means there is no persisted policy to load.
	ErrNoState = errors.New("policy: no persisted state")
	// ErrBadState means the persisted policy is damaged: its manifest
	// names a shard file that is missing or does not hold what its name
	// (the SHA-256 of its content) says.
	ErrBadState = errors.New("policy: persisted state is damaged")
	// ErrConfig is a SaverConfig NewSaver cannot work with.
	ErrConfig = errors.New("policy: bad config")
)
