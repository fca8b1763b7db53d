package secret

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValue(t *testing.T) {
	dir := t.TempDir()
	for name, v := range map[string]string{"plain": "abc", "nl": "abc\n", "crlf": "abc\r\n", "ctl": "a\nb", "empty": "\n",
		"big": strings.Repeat("a", MaxValueBytes+1)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	d := NewDir(dir)
	for _, name := range []string{"plain", "nl", "crlf"} {
		if v, err := d.Value(name); err != nil || v != "abc" {
			t.Errorf("%s: %q %v", name, v, err)
		}
	}
	for name, want := range map[string]error{"ctl": ErrInvalidValue, "empty": ErrInvalidValue, "big": ErrInvalidValue,
		"missing": ErrNotFound, "sub": ErrNotFound, "..data": ErrInvalidName, "../etc": ErrInvalidName, "a/b": ErrInvalidName} {
		v, err := d.Value(name)
		if !errors.Is(err, want) || v != "" {
			t.Errorf("%s: got a value of %d bytes, err %v, want %v", name, len(v), err, want)
		}
		if err != nil && strings.Contains(err.Error(), "a\nb") {
			t.Errorf("%s: error carries the value: %v", name, err)
		}
	}
	if _, err := (*Dir)(nil).Value("plain"); !errors.Is(err, ErrNotConfigured) {
		t.Errorf("nil dir: %v", err)
	}
	if NewDir("") != nil || NewDir("").Configured() {
		t.Error("empty path must be not configured")
	}
}
