// Package atomicfile replaces a file's contents all at once: it writes a
// temporary file in the same directory, syncs it, renames it over the
// target and syncs the directory. A reader (a process reloading its
// certificates, a service booting from its last good state) sees the old
// file or the new one, never part of either, and a crash leaves one of the
// two.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write writes data to path atomically with mode perm, creating the
// directory (0755) when it is missing.
func Write(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	defer os.Remove(f.Name()) // no-op after the rename
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the rename durable where the platform allows
		d.Close()
	}
	return nil
}
