// Package secret reads the values HTTP targets reference by secretRef
// from a directory holding one file per secret name, the layout of a
// Kubernetes Secret volume. Every read goes to the file, so a rotated
// secret (the kubelet swaps the volume's ..data symlink) is used by the
// next attempt without a restart.
//
// A value is only ever given out for a tenant and a destination its
// binding allows (bindings.go): Authorize at create and PATCH, Resolve at
// every attempt.
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
	"log/slog"
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

// Dir reads secrets from one directory under the bindings of one file;
// the zero value and nil are "not configured". Safe for concurrent use.
type Dir struct {
	path     string
	bindings *bindingsSource
}

// NewDir returns a Dir reading from path, giving values out as the
// bindings file allows; empty path returns nil (not configured). Neither
// need exist yet (a volume may mount late); without a bindings file no
// secret can be used. What is wrong with the bindings file goes to log
// (nil: discarded).
func NewDir(path, bindingsFile string, log *slog.Logger) *Dir {
	if path == "" {
		return nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Dir{path: filepath.Clean(path)}
	if bindingsFile != "" {
		d.bindings = &bindingsSource{path: filepath.Clean(bindingsFile), log: log}
	}
	return d
}

// Authorize reports whether a job of tenant calling targetURL may
// reference secret name: ErrNotBound, ErrDestination or ErrBindings from
// its binding (checked first, so another tenant's secret looks like any
// unbound name), then ErrNotFound if the file is missing.
func (d *Dir) Authorize(tenant, name, targetURL string) error {
	if !d.Configured() {
		return ErrNotConfigured
	}
	if !ValidName(name) {
		return fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	if err := d.bindings.authorize(tenant, name, targetURL); err != nil {
		return err
	}
	return d.check(name)
}

// Resolve returns the value of secret name for a job of tenant calling
// targetURL, after Authorize.
func (d *Dir) Resolve(tenant, name, targetURL string) (string, error) {
	if err := d.Authorize(tenant, name, targetURL); err != nil {
		return "", err
	}
	return d.value(name)
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

// check reports whether the secret exists as a regular file (following
// symlinks), without reading it.
func (d *Dir) check(name string) error {
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

// value reads the secret's current value. One trailing newline (CRLF or
// LF, as editors and `echo` leave) is dropped; any other control byte
// makes it ErrInvalidValue, so a value can never split a header.
func (d *Dir) value(name string) (string, error) {
	if err := d.check(name); err != nil {
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
