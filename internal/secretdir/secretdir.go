// Package secretdir reads secrets referenced by name from a directory
// holding one file per secret: the layout of a mounted Kubernetes Secret
// volume. Configuration carries only the name (the scheduler's secretRef,
// extauthz's introspection client secret), so a value is never in a
// database, an audit log, an xDS snapshot or a persisted policy.
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
	"regexp"
	"strings"
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

var validName = regexp.MustCompile(`^[-._a-zA-Z0-9]{1,253}$`)

// ValidName reports whether name may name a secret: a Kubernetes Secret
// key, and not "." or ".."-prefixed (the kubelet's own entries), so it
// cannot leave the directory.
func ValidName(name string) bool {
	return validName.MatchString(name) && name != "." && !strings.HasPrefix(name, "..")
}

// Check reports whether secret name exists in dir as a regular file
// (following symlinks), without reading it.
func Check(dir, name string) error {
	f, err := open(dir, name)
	if err != nil {
		return err
	}
	return f.Close()
}

// open opens secret name in dir, a regular file.
func open(dir, name string) (*os.File, error) {
	if dir == "" {
		return nil, ErrNotConfigured
	}
	if !ValidName(name) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	f, err := os.Open(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %q in %s", ErrNotFound, name, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("secretdir: %q: %w", name, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: %q in %s is not a regular file", ErrNotFound, name, dir)
	}
	return f, nil
}

// Read returns the current value of secret name in dir. One trailing
// newline (LF or CRLF, as editors and echo leave) is dropped; any other
// control character makes the value invalid.
func Read(dir, name string) (string, error) {
	f, err := open(dir, name)
	if err != nil {
		return "", err
	}
	defer f.Close()
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
