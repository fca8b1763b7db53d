package secretdir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name, v string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("plain", "s3cret")
	write("newline", "s3cret\r\n")
	write("empty", "\n")
	write("control", "a\nb")
	write("large", strings.Repeat("x", MaxValueBytes+1))
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"plain": "s3cret", "newline": "s3cret"} {
		if got, err := Read(dir, name); err != nil || got != want {
			t.Errorf("Read(%s) = %q, %v", name, got, err)
		}
	}
	for name, want := range map[string]error{"empty": ErrInvalidValue, "control": ErrInvalidValue, "large": ErrInvalidValue,
		"missing": ErrNotFound, "adir": ErrNotFound, "../plain": ErrInvalidName, "..data": ErrInvalidName} {
		if _, err := Read(dir, name); !errors.Is(err, want) {
			t.Errorf("Read(%s): %v, want %v", name, err, want)
		}
	}
	if _, err := Read("", "plain"); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("no dir: %v", err)
	}
	if _, err := Read(dir, "control"); err == nil || strings.Contains(err.Error(), "a\nb") {
		t.Errorf("error leaks the value: %v", err)
	}
}

func TestValidName(t *testing.T) {
	for name, want := range map[string]bool{"idp-introspection": true, "a.b_C-9": true, ".": false, "..data": false,
		"../x": false, "a/b": false, "": false, "a b": false} {
		if ValidName(name) != want {
			t.Errorf("ValidName(%q) != %v", name, want)
		}
	}
}
