package authn

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// BootstrapToken returns the bootstrap admin token kept in path. On first
// start (no file) it mints one and writes it, mode 0600, atomically and
// exclusively: of several processes starting at once exactly one creates it
// (created is true for that one, which should print it once) and the others
// read it. An existing file must hold one well-formed token and be readable
// by its owner only; otherwise BootstrapToken fails rather than trust it.
//
// The file holds the plaintext because CLIs and `make run` read it
// (PORTICO_ADMIN_TOKEN_FILE); servers keep only its hash.
func BootstrapToken(path string) (tok IssuedToken, created bool, err error) {
	tok, err = readTokenFile(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return tok, false, err
	}
	tok = NewToken()
	tmp, err := os.CreateTemp(filepath.Dir(path), ".admin-token-*")
	if err != nil {
		return IssuedToken{}, false, fmt.Errorf("authn: bootstrap token: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.WriteString(tok.Plaintext + "\n")
	if err := errors.Join(werr, tmp.Sync(), tmp.Close()); err != nil {
		return IssuedToken{}, false, fmt.Errorf("authn: bootstrap token: %w", err)
	}
	// CreateTemp made it 0600. Link, unlike rename, fails if path exists.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			tok, err = readTokenFile(path)
			return tok, false, err
		}
		return IssuedToken{}, false, fmt.Errorf("authn: bootstrap token: %w", err)
	}
	return tok, true, nil
}

func readTokenFile(path string) (IssuedToken, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return IssuedToken{}, err
	}
	// Group read is allowed: Kubernetes mounts a Secret group-readable by
	// the pod's fsGroup. Anything for others, or group write, is refused.
	if fi.Mode().Perm()&0o027 != 0 {
		return IssuedToken{}, fmt.Errorf("%w: %s is accessible to others (mode %v, want 0600 or 0640)", ErrConfig, path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return IssuedToken{}, fmt.Errorf("authn: bootstrap token: %w", err)
	}
	plain := strings.TrimSpace(string(b))
	id, err := ParseTokenID(plain)
	if err != nil {
		return IssuedToken{}, fmt.Errorf("%w: %s: %w", ErrConfig, path, err)
	}
	return IssuedToken{Plaintext: plain, ID: id, Hash: HashToken(plain)}, nil
}

// StaticTokens is a TokenStore of a fixed set of tokens held in memory, for
// components without a token table that must still accept the bootstrap
// admin token (kvnode, a scheduler before its tenants exist). Last use is
// kept in memory only. It is safe for concurrent use.
type StaticTokens struct {
	mu     sync.Mutex
	tokens map[string]StoredToken
}

var _ TokenStore = (*StaticTokens)(nil)

// NewStaticTokens returns a store of these tokens (ID and Hash required).
func NewStaticTokens(tokens ...StoredToken) (*StaticTokens, error) {
	s := &StaticTokens{tokens: map[string]StoredToken{}}
	for _, t := range tokens {
		if t.ID == "" || t.Hash == [len(t.Hash)]byte{} {
			return nil, fmt.Errorf("%w: static token without id or hash", ErrConfig)
		}
		if _, dup := s.tokens[t.ID]; dup {
			return nil, fmt.Errorf("%w: static token %s listed twice", ErrConfig, t.ID)
		}
		t.Roles, t.Keyspaces = clone(t.Roles), clone(t.Keyspaces)
		s.tokens[t.ID] = t
	}
	return s, nil
}

// LookupToken implements TokenStore.
func (s *StaticTokens) LookupToken(_ context.Context, id string) (StoredToken, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tokens[id]
	if !ok {
		return StoredToken{}, ErrTokenNotFound
	}
	t.Roles, t.Keyspaces = clone(t.Roles), clone(t.Keyspaces)
	return t, nil
}

// TouchToken implements TokenStore.
func (s *StaticTokens) TouchToken(_ context.Context, id string, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.tokens[id]; ok {
		t.LastUsed = at
		s.tokens[id] = t
	}
	return nil
}
