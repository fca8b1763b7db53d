// Package seal encrypts small secrets (TLS private keys) at rest with
// AES-256-GCM under one 32-byte key held by the control plane.
//
// The sealed form is text, "v1:" followed by base64 (standard, padded) of
// the 12-byte nonce and the ciphertext with its tag, so it can sit in a JSON
// resource body. The version prefix leaves room for key rotation: a later
// format names its key. A Sealer is safe for concurrent use.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
)

// KeySize is the key length in bytes (AES-256).
const KeySize = 32

// Prefix starts every sealed value of the current format.
const Prefix = "v1:"

var (
	// ErrKey: the key is not KeySize bytes of base64.
	ErrKey = errors.New("seal: key must be 32 bytes, base64-encoded")
	// ErrMalformed: the value is not a sealed value of a known format.
	ErrMalformed = errors.New("seal: malformed sealed value")
	// ErrOpen: the value was sealed under another key or was altered.
	ErrOpen = errors.New("seal: cannot open sealed value (wrong key or tampered)")
)

// Sealer seals and opens values under one key.
type Sealer struct {
	aead cipher.AEAD
}

// New returns a Sealer for a KeySize-byte key.
func New(key []byte) (*Sealer, error) {
	if len(key) != KeySize {
		return nil, ErrKey
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKey, err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return &Sealer{aead: aead}, nil
}

// ParseKey decodes a base64 (standard or URL alphabet, padded or not) key;
// surrounding whitespace, as in a key file, is ignored.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil && len(k) == KeySize {
			return k, nil
		}
	}
	return nil, ErrKey
}

// ReadKeyFile reads a key file holding one base64 key.
func ReadKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("seal: key file: %w", err)
	}
	return ParseKey(string(b))
}

// NewKey returns a random key, base64-encoded (what a key file holds).
func NewKey() (string, error) {
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		return "", fmt.Errorf("seal: random key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(k), nil
}

// Seal encrypts plaintext under a fresh random nonce.
func (s *Sealer) Seal(plaintext []byte) (string, error) {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("seal: random nonce: %w", err)
	}
	out := s.aead.Seal(nonce, nonce, plaintext, []byte(Prefix))
	return Prefix + base64.StdEncoding.EncodeToString(out), nil
}

// Open decrypts a value made by Seal under the same key.
func (s *Sealer) Open(sealed string) ([]byte, error) {
	rest, ok := strings.CutPrefix(sealed, Prefix)
	if !ok {
		return nil, ErrMalformed
	}
	raw, err := base64.StdEncoding.DecodeString(rest)
	if err != nil || len(raw) < s.aead.NonceSize()+s.aead.Overhead() {
		return nil, ErrMalformed
	}
	n := s.aead.NonceSize()
	pt, err := s.aead.Open(nil, raw[:n], raw[n:], []byte(Prefix))
	if err != nil {
		return nil, ErrOpen
	}
	return pt, nil
}

// IsSealed reports whether v looks like a sealed value (without opening it).
func IsSealed(v string) bool {
	rest, ok := strings.CutPrefix(v, Prefix)
	if !ok {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(rest)
	return err == nil && len(raw) >= 12+16
}
