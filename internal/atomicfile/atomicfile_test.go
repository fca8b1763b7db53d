package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReplacesWholeFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "f")
	for _, data := range []string{"first", "second, longer", ""} {
		if err := Write(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != data {
			t.Fatalf("read %q, %v; want %q", got, err, data)
		}
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*"))
	if len(left) != 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
	if err := Write(filepath.Join(path, "under-a-file"), nil, 0o600); err == nil {
		t.Error("writing below a regular file succeeded")
	}
}
