// Package secretdir reads the secrets extauthz's policy references by name
// (an introspection client secret) from a directory holding one file per
// secret: the layout of a mounted Kubernetes Secret volume. Providers carry
// only the name, so the value is never in the control plane's store, its
// audit log, an xDS snapshot or extauthz's persisted policy.
//
// Every Read goes to the file, so a rotated secret (the kubelet swaps the
// volume's ..data symlink) is used by the next call without a restart.
// Values are never logged or put in errors; callers must keep it that way.
package secretdir

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/portico-io/portico/internal/idp"
)

// MaxValueBytes bounds a secret value.
const MaxValueBytes = 16 << 10

var (
	// ErrNotConfigured: no secrets directory was configured.
	ErrNotConfigured = errors.New("secretdir: no secrets directory configured")
	// ErrInvalidName: the name cannot name a file in the directory.
	ErrInvalidName = errors.New("secretdir: invalid secret name")
	// ErrNotFound: the directory has no regular file of that name.
	ErrNotFound = errors.New("secretdir: secret not found")
	// ErrInvalidValue: the file is empty, too large or holds control
	// characters.
	ErrInvalidValue = errors.New("secretdir: invalid secret value")
)

// Read returns the current value of secret name in dir. One trailing
// newline (LF or CRLF, as editors and echo leave) is dropped; any other
// control character makes the value invalid.
func Read(dir, name string) (string, error) {
	if dir == "" {
		return "", ErrNotConfigured
	}
	if !idp.ValidSecretName(name) {
		return "", fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	path := filepath.Join(dir, name)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: %q in %s", ErrNotFound, name, dir)
	}
	if err != nil {
		return "", fmt.Errorf("secretdir: %q: %w", name, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %q in %s is not a regular file", ErrNotFound, name, dir)
	}
	buf, err := io.ReadAll(io.LimitReader(f, MaxValueBytes+3))
	if err != nil {
		return "", fmt.Errorf("secretdir: %q: %w", name, err)
	}
	v := bytes.TrimSuffix(bytes.TrimSuffix(buf, []byte("\n")), []byte("\r"))
	switch {
	case len(v) > MaxValueBytes:
		return "", fmt.Errorf("%w: %q is larger than %d bytes", ErrInvalidValue, name, MaxValueBytes)
	case len(v) == 0:
		return "", fmt.Errorf("%w: %q is empty", ErrInvalidValue, name)
	}
	for _, c := range v {
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return "", fmt.Errorf("%w: %q contains control characters", ErrInvalidValue, name)
		}
	}
	return string(v), nil
}
