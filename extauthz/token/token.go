// Package token parses and verifies compact JWS JSON Web Tokens against a
// provider's pinned algorithms and public keys.
//
// Only the header fields alg and kid are ever used: jku, x5u, x5c and jwk
// are ignored, so a token can never choose where its keys come from. HMAC
// and "none" are not implemented at all, which rules out alg confusion
// (HS256 signed with an RSA public key) whatever a provider lists.
package token

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"time"
)

// MaxLen bounds the size of a token extauthz will look at.
const MaxLen = 16 << 10

// Header is the protected JOSE header (only the fields extauthz uses).
type Header struct {
	Alg  string   `json:"alg"`
	Kid  string   `json:"kid"`
	Crit []string `json:"crit"`
}

// Claims are the registered claims plus the ones Portico maps to headers.
type Claims struct {
	Issuer    string   `json:"iss"`
	Subject   string   `json:"sub"`
	Audience  Audience `json:"aud"`
	Expiry    *float64 `json:"exp"`
	NotBefore *float64 `json:"nbf"`
	IssuedAt  *float64 `json:"iat"`
	ID        string   `json:"jti"`
	// Scope is the OAuth 2 space-separated form; Scp the array form.
	Scope  string  `json:"scope"`
	Scp    Strings `json:"scp"`
	Tenant string  `json:"tenant"`
	Tier   string  `json:"tier"`
}

// Scopes returns the union of scope and scp.
func (c *Claims) Scopes() []string {
	out := strings.Fields(c.Scope)
	for _, s := range c.Scp {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// ExpiresAt returns exp as a time (zero when absent).
func (c *Claims) ExpiresAt() time.Time { return numericDate(c.Expiry) }

func numericDate(f *float64) time.Time {
	if f == nil {
		return time.Time{}
	}
	sec, frac := math.Modf(*f)
	return time.Unix(int64(sec), int64(frac*1e9))
}

// Audience is a string or an array of strings.
type Audience []string

func (a *Audience) UnmarshalJSON(b []byte) error {
	s, err := stringOrArray(b)
	*a = s
	return err
}

// Strings is a string or an array of strings (scp is both in the wild).
type Strings []string

func (a *Strings) UnmarshalJSON(b []byte) error {
	s, err := stringOrArray(b)
	if len(s) == 1 {
		s = strings.Fields(s[0])
	}
	*a = s
	return err
}

func stringOrArray(b []byte) ([]string, error) {
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("[")) {
		var s []string
		return s, json.Unmarshal(b, &s)
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	return []string{s}, nil
}

// Token is a parsed, not yet verified, JWT.
type Token struct {
	Header Header
	Claims Claims
	// signingInput is "header.payload"; sig the decoded signature.
	signingInput string
	sig          []byte
}

// Parse splits and decodes a compact JWS. It checks structure only; call
// Verify before trusting anything in it.
func Parse(raw string) (*Token, error) {
	if len(raw) > MaxLen {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, MaxLen)
	}
	h, rest, ok := strings.Cut(raw, ".")
	if !ok {
		return nil, fmt.Errorf("%w: not a compact JWS", ErrMalformed)
	}
	p, s, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(s, ".") {
		return nil, fmt.Errorf("%w: not a compact JWS", ErrMalformed)
	}
	t := &Token{signingInput: raw[:len(h)+1+len(p)]}
	hb, err := base64.RawURLEncoding.Strict().DecodeString(h)
	if err != nil {
		return nil, fmt.Errorf("%w: header encoding", ErrMalformed)
	}
	if err := json.Unmarshal(hb, &t.Header); err != nil {
		return nil, fmt.Errorf("%w: header JSON", ErrMalformed)
	}
	pb, err := base64.RawURLEncoding.Strict().DecodeString(p)
	if err != nil {
		return nil, fmt.Errorf("%w: payload encoding", ErrMalformed)
	}
	if err := json.Unmarshal(pb, &t.Claims); err != nil {
		return nil, fmt.Errorf("%w: claims JSON", ErrMalformed)
	}
	if t.sig, err = base64.RawURLEncoding.Strict().DecodeString(s); err != nil {
		return nil, fmt.Errorf("%w: signature encoding", ErrMalformed)
	}
	if len(t.Header.Crit) > 0 {
		// No extension is understood, so any critical one must fail (RFC 7515 §4.1.11).
		return nil, fmt.Errorf("%w: unsupported crit header", ErrMalformed)
	}
	return t, nil
}

// CheckAlg rejects an algorithm extauthz does not implement or the provider
// did not pin. Call it before looking up keys, so tokens with a bogus alg
// cannot trigger JWKS fetches.
func (t *Token) CheckAlg(allowed []string) error {
	if _, ok := hashes[t.Header.Alg]; !ok && t.Header.Alg != "EdDSA" {
		return fmt.Errorf("%w: %q", ErrAlgorithm, truncate(t.Header.Alg))
	}
	if !slices.Contains(allowed, t.Header.Alg) {
		return fmt.Errorf("%w: %q is not allowed for this provider", ErrAlgorithm, t.Header.Alg)
	}
	return nil
}

var hashes = map[string]crypto.Hash{
	"RS256": crypto.SHA256, "RS384": crypto.SHA384, "RS512": crypto.SHA512,
	"PS256": crypto.SHA256, "PS384": crypto.SHA384, "PS512": crypto.SHA512,
	"ES256": crypto.SHA256, "ES384": crypto.SHA384, "ES512": crypto.SHA512,
}

var curves = map[string]elliptic.Curve{"ES256": elliptic.P256(), "ES384": elliptic.P384(), "ES512": elliptic.P521()}

// VerifySignature checks the signature with key under the token's alg. The
// key's type must match the algorithm family (an RSA key never verifies an
// ES256 token, and no key verifies an HMAC one). keyAlg, when a JWK names
// one, must equal the token's alg.
func (t *Token) VerifySignature(key crypto.PublicKey, keyAlg string) error {
	alg := t.Header.Alg
	if keyAlg != "" && keyAlg != alg {
		return fmt.Errorf("%w: key is for %s", ErrSignature, truncate(keyAlg))
	}
	if alg == "EdDSA" {
		k, ok := key.(ed25519.PublicKey)
		if !ok || !ed25519.Verify(k, []byte(t.signingInput), t.sig) {
			return ErrSignature
		}
		return nil
	}
	hash, ok := hashes[alg]
	if !ok {
		return fmt.Errorf("%w: %q", ErrAlgorithm, truncate(alg))
	}
	h := hash.New()
	h.Write([]byte(t.signingInput))
	digest := h.Sum(nil)
	switch alg[0] {
	case 'R':
		k, ok := key.(*rsa.PublicKey)
		if !ok || k.N.BitLen() < 2048 || rsa.VerifyPKCS1v15(k, hash, digest, t.sig) != nil {
			return ErrSignature
		}
	case 'P':
		k, ok := key.(*rsa.PublicKey)
		if !ok || k.N.BitLen() < 2048 || rsa.VerifyPSS(k, hash, digest, t.sig, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash}) != nil {
			return ErrSignature
		}
	case 'E':
		k, ok := key.(*ecdsa.PublicKey)
		if !ok || k.Curve != curves[alg] {
			return ErrSignature
		}
		size := (k.Curve.Params().BitSize + 7) / 8
		if len(t.sig) != 2*size {
			return ErrSignature
		}
		r := new(big.Int).SetBytes(t.sig[:size])
		s := new(big.Int).SetBytes(t.sig[size:])
		if !ecdsa.Verify(k, digest, r, s) {
			return ErrSignature
		}
	default:
		return ErrSignature
	}
	return nil
}

// Expectations are what the claims must satisfy.
type Expectations struct {
	Issuer string
	// Audiences: the token must name at least one (none = not checked).
	Audiences []string
	Skew      time.Duration
	Now       time.Time
}

// ValidateClaims checks iss, aud, exp (required), nbf and iat with skew.
func (t *Token) ValidateClaims(e Expectations) error {
	c := &t.Claims
	if c.Issuer != e.Issuer {
		return ErrIssuer
	}
	if len(e.Audiences) > 0 && !slices.ContainsFunc(c.Audience, func(a string) bool { return slices.Contains(e.Audiences, a) }) {
		return ErrAudience
	}
	if c.Expiry == nil {
		return fmt.Errorf("%w: no exp", ErrExpired)
	}
	if bad(c.Expiry) || bad(c.NotBefore) || bad(c.IssuedAt) {
		return fmt.Errorf("%w: bad numeric date", ErrMalformed)
	}
	if e.Now.After(numericDate(c.Expiry).Add(e.Skew)) {
		return ErrExpired
	}
	if c.NotBefore != nil && e.Now.Add(e.Skew).Before(numericDate(c.NotBefore)) {
		return ErrNotYetValid
	}
	if c.IssuedAt != nil && e.Now.Add(e.Skew).Before(numericDate(c.IssuedAt)) {
		return fmt.Errorf("%w: issued in the future", ErrNotYetValid)
	}
	return nil
}

// bad rejects dates that cannot be a time (NaN, ±Inf, beyond year 10000).
func bad(f *float64) bool {
	return f != nil && (math.IsNaN(*f) || math.IsInf(*f, 0) || math.Abs(*f) > 253402300799)
}

func truncate(s string) string {
	if len(s) > 16 {
		return s[:16] + "…"
	}
	return s
}
