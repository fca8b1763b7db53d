// Package secret reads the values HTTP targets reference by secretRef
// from a directory holding one file per secret name, the layout of a
// Kubernetes Secret volume. Every read goes to the file, so a rotated
// secret (the kubelet swaps the volume's ..data symlink) is used by the
// next attempt without a restart.
//
// Values are never logged, stored or returned by this package's errors;
// callers must keep it that way (see httptarget's redaction of echoes).
package secret

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
)

// MaxValueBytes bounds a secret value (it becomes one header).
const MaxValueBytes = 16 << 10

var (
	// ErrNotConfigured: no secrets directory was configured.
	ErrNotConfigured = errors.New("secret: no secrets directory configured")
	// ErrNotFound: the directory has no file of that name.
	ErrNotFound = errors.New("secret: not found")
	// ErrInvalidName: the name cannot be a Kubernetes Secret key.
	ErrInvalidName = errors.New("secret: invalid name")
	// ErrInvalidValue: the file's content cannot be sent as a header value.
	ErrInvalidValue = errors.New("secret: invalid value")
)

// validName is a Kubernetes Secret key: [-._a-zA-Z0-9]+, at most 253.
var validName = regexp.MustCompile(`^[-._a-zA-Z0-9]{1,253}$`)

// ValidName reports whether name may name a secret file. "." and ".."
// and names starting with ".." (the kubelet's own entries) are refused.
func ValidName(name string) bool {
	return validName.MatchString(name) && name != "." && !(len(name) >= 2 && name[:2] == "..")
}

// Dir reads secrets from one directory; the zero value and nil are "not
// configured". Safe for concurrent use.
type Dir struct{ path string }

// NewDir returns a Dir reading from path; empty path returns nil (not
// configured). The directory need not exist yet (a volume may mount late).
func NewDir(path string) *Dir {
	if path == "" {
		return nil
	}
	return &Dir{path: filepath.Clean(path)}
}

// Path is the directory read (empty when not configured).
func (d *Dir) Path() string {
	if d == nil {
		return ""
	}
	return d.path
}

// Configured reports whether a directory was given.
func (d *Dir) Configured() bool { return d != nil && d.path != "" }

// Check reports whether the secret exists as a regular file (following
// symlinks), without reading it.
func (d *Dir) Check(name string) error {
	if !d.Configured() {
		return ErrNotConfigured
	}
	if !ValidName(name) {
		return fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	fi, err := os.Stat(filepath.Join(d.path, name))
	if errors.Is(err, fs.ErrNotExist) || (err == nil && !fi.Mode().IsRegular()) {
		return fmt.Errorf("%w: %q in %s", ErrNotFound, name, d.path)
	}
	if err != nil {
		return fmt.Errorf("secret: %q: %w", name, err)
	}
	return nil
}

// Value reads the secret's current value. One trailing newline (CRLF or
// LF, as editors and `echo` leave) is dropped; any other control byte
// makes it ErrInvalidValue, so a value can never split a header.
func (d *Dir) Value(name string) (string, error) {
	if err := d.Check(name); err != nil {
		return "", err
	}
	f, err := os.Open(filepath.Join(d.path, name))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%w: %q in %s", ErrNotFound, name, d.path)
		}
		return "", fmt.Errorf("secret: %q: %w", name, err)
	}
	defer f.Close()
	buf, err := io.ReadAll(io.LimitReader(f, MaxValueBytes+3))
	if err != nil {
		return "", fmt.Errorf("secret: %q: %w", name, err)
	}
	v := bytes.TrimSuffix(bytes.TrimSuffix(buf, []byte("\n")), []byte("\r"))
	if len(v) > MaxValueBytes {
		return "", fmt.Errorf("%w: %q is larger than %d bytes", ErrInvalidValue, name, MaxValueBytes)
	}
	if len(v) == 0 {
		return "", fmt.Errorf("%w: %q is empty", ErrInvalidValue, name)
	}
	for _, c := range v {
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return "", fmt.Errorf("%w: %q contains control characters", ErrInvalidValue, name)
		}
	}
	return string(v), nil
}
