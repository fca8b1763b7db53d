package authn

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// API token format: "ptk_" + 16 lowercase hex characters (8 random bytes, the
// token id and lookup key, safe to show and log) + "_" + 43 base64url
// characters (32 random bytes, the secret). Only the SHA-256 of the whole
// token is ever stored.
const (
	TokenPrefix = "ptk_"
	tokenIDLen  = 16
	secretLen   = 43 // base64.RawURLEncoding.EncodedLen(32)
	// TokenLen is the length of every API token.
	TokenLen = len(TokenPrefix) + tokenIDLen + 1 + secretLen
)

// LastUsedInterval is the least time between two last-used writes for one
// token: the store sees at most one write per token per interval, not one
// per request.
const LastUsedInterval = time.Minute

// Limits of a request to mint an API token, the same on every API that
// mints them.
const (
	// MaxTokenNameLen bounds a token's name (its human label).
	MaxTokenNameLen = 128
	// MaxTokenTTL bounds a token's life; a longer-lived credential belongs
	// in the operators' IdP.
	MaxTokenTTL = 366 * 24 * time.Hour
)

// CheckTokenName refuses (ErrBadTokenRequest) a blank name or one longer
// than MaxTokenNameLen bytes.
func CheckTokenName(name string) error {
	if strings.TrimSpace(name) == "" || len(name) > MaxTokenNameLen {
		return fmt.Errorf("%w: the name is required, at most %d bytes", ErrBadTokenRequest, MaxTokenNameLen)
	}
	return nil
}

// CheckTokenExpiry refuses (ErrBadTokenRequest) an expiry that is not
// after now, or more than MaxTokenTTL after it. "Never expires" is the
// absence of an expiry, never a zero time: call this only for an expiry
// the request states (a zero one is refused, as it is in the past).
func CheckTokenExpiry(expiresAt, now time.Time) error {
	if !expiresAt.After(now) || expiresAt.Sub(now) > MaxTokenTTL {
		return fmt.Errorf("%w: the expiry must be in the future, at most %d days ahead", ErrBadTokenRequest, MaxTokenTTL/(24*time.Hour))
	}
	return nil
}

// IssuedToken is a freshly minted API token. Plaintext is shown to its
// owner once and never stored; ID and Hash are what the TokenStore keeps.
type IssuedToken struct {
	Plaintext string
	ID        string
	Hash      [sha256.Size]byte
}

// NewToken mints an API token from crypto/rand.
func NewToken() IssuedToken {
	var id [tokenIDLen / 2]byte
	var secret [32]byte
	// crypto/rand.Read never returns an error (it aborts the program instead).
	_, _ = rand.Read(id[:])
	_, _ = rand.Read(secret[:])
	plain := TokenPrefix + hex.EncodeToString(id[:]) + "_" + base64.RawURLEncoding.EncodeToString(secret[:])
	return IssuedToken{Plaintext: plain, ID: hex.EncodeToString(id[:]), Hash: HashToken(plain)}
}

// HashToken is the stored form of a token: SHA-256 of the whole plaintext.
func HashToken(plaintext string) [sha256.Size]byte { return sha256.Sum256([]byte(plaintext)) }

// IsAPIToken reports whether raw claims to be an API token (has the ptk_
// prefix), whether or not it is well formed.
func IsAPIToken(raw string) bool { return strings.HasPrefix(raw, TokenPrefix) }

// ParseTokenID checks the shape of an API token and returns its id.
func ParseTokenID(raw string) (string, error) {
	if len(raw) != TokenLen || !IsAPIToken(raw) || raw[len(TokenPrefix)+tokenIDLen] != '_' {
		return "", fmt.Errorf("%w: not a ptk_<id>_<secret> token", ErrMalformed)
	}
	id := raw[len(TokenPrefix) : len(TokenPrefix)+tokenIDLen]
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9') && !('a' <= c && c <= 'f') {
			return "", fmt.Errorf("%w: token id is not lowercase hex", ErrMalformed)
		}
	}
	secret := raw[len(TokenPrefix)+tokenIDLen+1:]
	if b, err := base64.RawURLEncoding.Strict().DecodeString(secret); err != nil || len(b) != 32 {
		return "", fmt.Errorf("%w: token secret is not 32 bytes of base64url", ErrMalformed)
	}
	return id, nil
}

// StoredToken is what a TokenStore keeps about one API token.
type StoredToken struct {
	ID   string
	Hash [sha256.Size]byte
	// Name is a human label ("ci-deploy"), recorded as the audit author's name.
	Name  string
	Roles []string
	// Tenant and Keyspaces confine the token; see Principal.
	Tenant    string
	Keyspaces []string
	// ExpiresAt is when the token stops working (zero: never).
	ExpiresAt time.Time
	Revoked   bool
	// LastUsed is the last recorded use (zero: never), used to skip writes.
	LastUsed time.Time
}

// TokenStore is the persistence the Authenticator needs for API tokens. It
// is consulted on every request carrying one, so revocation takes effect on
// the next request; implementations must be safe for concurrent use.
type TokenStore interface {
	// LookupToken returns the token with this id, or ErrTokenNotFound.
	LookupToken(ctx context.Context, id string) (StoredToken, error)
	// TouchToken records a use of the token at the given time. It is called
	// at most once per LastUsedInterval per token by one Authenticator.
	TouchToken(ctx context.Context, id string, at time.Time) error
}

// touches throttles last-used writes. Entries exist only for tokens that
// verified, and are dropped once older than LastUsedInterval, so the map is
// bounded by the tokens in use within one interval.
type touches struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// due reports whether a write for id at now is due, and if so reserves it.
func (t *touches) due(id string, stored, now time.Time) bool {
	if !stored.IsZero() && now.Sub(stored) < LastUsedInterval {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if at, ok := t.last[id]; ok && now.Sub(at) < LastUsedInterval {
		return false
	}
	for k, at := range t.last {
		if now.Sub(at) >= LastUsedInterval {
			delete(t.last, k)
		}
	}
	t.last[id] = now
	return true
}

// dummyHash equalises work when a token id is unknown.
var dummyHash = HashToken("ptk_0000000000000000_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")

func (a *Authenticator) verifyAPIToken(ctx context.Context, raw string) (Principal, error) {
	if a.cfg.Tokens == nil {
		return Principal{}, fmt.Errorf("%w: API tokens are not accepted here", ErrInvalidToken)
	}
	id, err := ParseTokenID(raw)
	if err != nil {
		return Principal{}, err
	}
	st, err := a.cfg.Tokens.LookupToken(ctx, id)
	sum := HashToken(raw)
	switch {
	case errors.Is(err, ErrTokenNotFound):
		subtle.ConstantTimeCompare(sum[:], dummyHash[:])
		return Principal{}, fmt.Errorf("%w: unknown token %s", ErrInvalidToken, id)
	case err != nil:
		return Principal{}, fmt.Errorf("%w: token store: %w", ErrUnavailable, err)
	}
	// Compare before saying anything about expiry or revocation: knowing an
	// id must not reveal the token's state.
	if subtle.ConstantTimeCompare(sum[:], st.Hash[:]) != 1 || st.ID != id {
		return Principal{}, fmt.Errorf("%w: token %s: wrong secret", ErrInvalidToken, id)
	}
	now := a.cfg.TimeNow()
	if st.Revoked {
		return Principal{}, fmt.Errorf("%w: token %s", ErrRevoked, id)
	}
	if !st.ExpiresAt.IsZero() && !now.Before(st.ExpiresAt) {
		return Principal{}, fmt.Errorf("%w: token %s expired at %s", ErrExpired, id, st.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if a.touched.due(id, st.LastUsed, now) {
		// Best effort: a failed write must not refuse a valid token.
		if err := a.cfg.Tokens.TouchToken(ctx, id, now); err != nil && ctx.Err() == nil {
			a.cfg.Logger.Warn("authn: recording token use failed", slog.String("token_id", id), slog.Any("err", err))
		}
	}
	return Principal{
		Kind:      KindToken,
		ID:        id,
		Name:      st.Name,
		Roles:     clone(st.Roles),
		Tenant:    st.Tenant,
		Keyspaces: clone(st.Keyspaces),
	}, nil
}

func clone(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return append([]string(nil), s...)
}
