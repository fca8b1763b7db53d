package launcher

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/portico-io/portico/controlplane/seal"
)

func TestSecretKeyIsMadeOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret.key")
	if err := ensureSecretKey(path); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	first, err := seal.ReadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := ensureSecretKey(path); err != nil {
		t.Fatal(err)
	}
	again, err := seal.ReadKeyFile(path)
	if err != nil || string(again) != string(first) {
		t.Fatal("the key changed on the second run")
	}
}
