package authn_test

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/portico-io/portico/internal/authn"
)

func TestBootstrapToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "admin-token")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var created int
	seen := map[string]bool{}
	for range 8 {
		wg.Go(func() {
			tok, c, err := authn.BootstrapToken(path)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			seen[tok.Plaintext] = true
			if c {
				created++
			}
		})
	}
	wg.Wait()
	if created != 1 || len(seen) != 1 {
		t.Fatalf("created %d times, %d distinct tokens; want 1 and 1", created, len(seen))
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	tok, c, err := authn.BootstrapToken(path)
	if err != nil || c || !seen[tok.Plaintext] || tok.Hash != authn.HashToken(tok.Plaintext) {
		t.Fatalf("second start: %v %v", c, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}

	// The bootstrap token authenticates through a StaticTokens store.
	store, err := authn.NewStaticTokens(authn.StoredToken{ID: tok.ID, Hash: tok.Hash, Name: "bootstrap-admin", Roles: []string{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := authn.New(authn.Config{Tokens: store})
	if p, err := a.Authenticate(requestWith(tok.Plaintext)); err != nil || p.Name != "bootstrap-admin" {
		t.Fatalf("%+v %v", p, err)
	}

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := authn.BootstrapToken(path); !errors.Is(err, authn.ErrConfig) {
		t.Fatalf("world-readable file: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(bad, []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := authn.BootstrapToken(bad); !errors.Is(err, authn.ErrConfig) {
		t.Fatalf("garbage file: %v", err)
	}
	if _, err := authn.NewStaticTokens(authn.StoredToken{ID: "x"}); !errors.Is(err, authn.ErrConfig) {
		t.Fatalf("no hash: %v", err)
	}
}
