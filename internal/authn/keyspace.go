package authn

import "fmt"

// MaxKeyspaceLen bounds a kvnode keyspace name.
const MaxKeyspaceLen = 64

// KeyspaceError is a name that cannot be a kvnode keyspace (see
// CheckKeyspace): Keyspace is the name, Reason says what is wrong with it.
// It wraps ErrInvalidKeyspace.
type KeyspaceError struct {
	Keyspace, Reason string
}

func (e *KeyspaceError) Error() string {
	return fmt.Sprintf("authn: invalid keyspace %q: %s", e.Keyspace, e.Reason)
}

func (e *KeyspaceError) Unwrap() error { return ErrInvalidKeyspace }

// CheckKeyspace returns a *KeyspaceError unless ks is a valid kvnode
// keyspace name: 1 to MaxKeyspaceLen of [A-Za-z0-9_.-]. It is the one rule
// for names a credential may be confined to (Principal.Keyspaces) and for
// the keyspaces kvnode serves; kvnode reserves some valid names on top.
func CheckKeyspace(ks string) error {
	if ks == "" || len(ks) > MaxKeyspaceLen {
		return &KeyspaceError{Keyspace: ks, Reason: fmt.Sprintf("must be 1-%d bytes", MaxKeyspaceLen)}
	}
	for i := 0; i < len(ks); i++ {
		if c := ks[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return &KeyspaceError{Keyspace: ks, Reason: "only letters, digits, '_', '.', '-'"}
		}
	}
	return nil
}
