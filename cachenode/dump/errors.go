package dump

import (
	"errors"
	"fmt"
)

// Errors.
var (
	// ErrCorrupt is a payload or record that does not decode: truncated,
	// bad checksum, impossible lengths.
	ErrCorrupt = errors.New("dump: corrupt payload")
	// ErrVersion is a value encoded by an unknown format version.
	ErrVersion = errors.New("dump: unsupported version")
	// ErrChecksum is a value whose checksum does not match (or too short to
	// have one); it wraps ErrCorrupt too.
	ErrChecksum = fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	// ErrShort is a buffer holding only part of a record: a stream reader
	// should read more and try again.
	ErrShort = errors.New("dump: incomplete record")
	// ErrNamespace is a record for a namespace the registry does not have.
	ErrNamespace = errors.New("dump: unknown namespace")
)
