package jwks_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/portico-io/portico/extauthz/jwks"
	"github.com/portico-io/portico/extauthz/policy"
)

const okpSet = `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo","kid":"ed"}]}`

// A JWKS endpoint that redirects is not followed: keys only ever come from
// the configured URL.
func TestRedirectNotFollowed(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		elsewhere.Add(1)
		_, _ = w.Write([]byte(okpSet))
	}))
	defer other.Close()
	redirect := httptest.NewServer(http.RedirectHandler(other.URL, http.StatusFound))
	defer redirect.Close()
	s, err := jwks.New(jwks.Config{URI: redirect.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Keys(context.Background(), "ed"); !errors.Is(err, jwks.ErrFetch) {
		t.Fatalf("err %v, want ErrFetch", err)
	}
	if elsewhere.Load() != 0 {
		t.Fatal("redirect followed")
	}
}

func TestOversizedAndInvalidSets(t *testing.T) {
	for name, body := range map[string]string{
		"oversized": `{"keys":[` + strings.Repeat(" ", jwks.MaxBodyBytes) + `]}`,
		"symmetric": `{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"hs"}]}`,
		"empty":     `{"keys":[]}`,
		"not json":  `<html>`,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(body)) }))
		s, _ := jwks.New(jwks.Config{URI: srv.URL})
		if _, err := s.Keys(context.Background(), "hs"); !errors.Is(err, jwks.ErrFetch) {
			t.Errorf("%s: err %v, want ErrFetch", name, err)
		}
		srv.Close()
	}
}

func TestInline(t *testing.T) {
	set, err := policy.ParseJWKS([]byte(okpSet))
	if err != nil {
		t.Fatal(err)
	}
	s, err := jwks.New(jwks.Config{Inline: set})
	if err != nil {
		t.Fatal(err)
	}
	if ks, err := s.Keys(context.Background(), "ed"); err != nil || len(ks) != 1 {
		t.Fatalf("%v %v", ks, err)
	}
	if _, err := s.Keys(context.Background(), "other"); !errors.Is(err, jwks.ErrUnknownKID) {
		t.Fatalf("unknown kid: %v", err)
	}
	if _, err := jwks.New(jwks.Config{}); !errors.Is(err, jwks.ErrConfig) {
		t.Fatalf("no source: %v", err)
	}
}
