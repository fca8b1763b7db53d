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
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/portico-io/portico/internal/secretdir"
)

// MaxValueBytes bounds a secret value (it becomes one header).
const MaxValueBytes = secretdir.MaxValueBytes

var (
	// ErrNotConfigured: no secrets directory was configured.
	ErrNotConfigured = secretdir.ErrNotConfigured
	// ErrNotFound: the directory has no file of that name.
	ErrNotFound = secretdir.ErrNotFound
	// ErrInvalidName: the name cannot be a Kubernetes Secret key.
	ErrInvalidName = secretdir.ErrInvalidName
	// ErrInvalidValue: the file's content cannot be sent as a header value.
	ErrInvalidValue = secretdir.ErrInvalidValue
)

// ValidName reports whether name may name a secret file (secretdir.ValidName).
func ValidName(name string) bool { return secretdir.ValidName(name) }

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
func (d *Dir) check(name string) error { return secretdir.Check(d.path, name) }

// value reads the secret's current value (secretdir.Read: one trailing
// newline dropped, control characters refused, so a value can never split
// a header).
func (d *Dir) value(name string) (string, error) { return secretdir.Read(d.path, name) }
