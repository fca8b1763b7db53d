package token_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/portico-io/portico/extauthz/token"
)

// FuzzParse: arbitrary input never panics, and whatever parses never
// verifies against a key it was not signed with.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", ".", "..", "a.b.c", "eyJhbGciOiJub25lIn0.e30.", "eyJhbGciOiJFUzI1NiJ9.eyJleHAiOjF9.AAAA",
		"eyJhbGciOiJFUzI1NiIsImNyaXQiOlsieCJdfQ.e30.", "eyJhbGciOiJFZERTQSJ9.eyJhdWQiOlsiYSIsMV19.", "eyJ9.eyJ9.eyJ9"} {
		f.Add(s)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := token.Parse(s)
		if err != nil {
			if !errors.Is(err, token.ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		_ = tok.CheckAlg([]string{"ES256", "RS256", "EdDSA"})
		if tok.VerifySignature(&key.PublicKey, "") == nil {
			t.Fatalf("%q verified against a fresh key", s)
		}
		_ = tok.ValidateClaims(token.Expectations{Issuer: "x", Now: time.Now()})
		_ = tok.Claims.Scopes()
	})
}
