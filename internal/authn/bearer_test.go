package authn_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/portico-io/portico/internal/authn"
)

func TestParseBearer(t *testing.T) {
	long := strings.Repeat("a", authn.MaxBearerLen)
	for _, tc := range []struct {
		name    string
		headers []string
		want    string
		err     error
	}{
		{"absent", nil, "", authn.ErrNoCredentials},
		{"ok", []string{"Bearer abc.DEF-_~+/9"}, "abc.DEF-_~+/9", nil},
		{"scheme lower case", []string{"bearer abc"}, "abc", nil},
		{"scheme upper case", []string{"BEARER abc"}, "abc", nil},
		{"padding", []string{"Bearer abc=="}, "abc==", nil},
		{"max length", []string{"Bearer " + long}, long, nil},
		{"too long", []string{"Bearer " + long + "a"}, "", authn.ErrMalformed},
		{"two headers", []string{"Bearer a", "Bearer b"}, "", authn.ErrMalformed},
		{"empty", []string{""}, "", authn.ErrMalformed},
		{"scheme only", []string{"Bearer"}, "", authn.ErrMalformed},
		{"scheme and space", []string{"Bearer "}, "", authn.ErrMalformed},
		{"basic", []string{"Basic dXNlcjpwYXNz"}, "", authn.ErrMalformed},
		{"no space", []string{"Bearerabc"}, "", authn.ErrMalformed},
		{"two spaces", []string{"Bearer  abc"}, "", authn.ErrMalformed},
		{"tab", []string{"Bearer\tabc"}, "", authn.ErrMalformed},
		{"inner space", []string{"Bearer abc def"}, "", authn.ErrMalformed},
		{"trailing space", []string{"Bearer abc "}, "", authn.ErrMalformed},
		{"comma", []string{"Bearer abc,def"}, "", authn.ErrMalformed},
		{"only padding", []string{"Bearer =="}, "", authn.ErrMalformed},
		{"padding inside", []string{"Bearer ab=c"}, "", authn.ErrMalformed},
		{"quote", []string{`Bearer "abc"`}, "", authn.ErrMalformed},
		{"non-ascii", []string{"Bearer abcé"}, "", authn.ErrMalformed},
		{"NUL", []string{"Bearer ab\x00c"}, "", authn.ErrMalformed},
		{"token then param", []string{`Bearer abc realm="x"`}, "", authn.ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tc.headers {
				h.Add("Authorization", v)
			}
			got, err := authn.ParseBearer(h)
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if got != tc.want {
				t.Fatalf("token = %q, want %q", got, tc.want)
			}
		})
	}
}

// FuzzParseBearer: the parser never panics, and whatever it accepts is
// exactly "<bearer, any case> <b64token>" within the length bound.
func FuzzParseBearer(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer a.b.c", "Bearer ", "Basic x", "Bearer a==", "Bearer =a", "Bearer  a", "BEARER ptk_0123456789abcdef_" + strings.Repeat("A", 43)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		tok, err := authn.ParseBearer(http.Header{"Authorization": {v}})
		if err != nil {
			if tok != "" {
				t.Fatalf("token %q returned with error %v", tok, err)
			}
			if !errors.Is(err, authn.ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if len(tok) == 0 || len(tok) > authn.MaxBearerLen {
			t.Fatalf("accepted length %d", len(tok))
		}
		if !strings.EqualFold(v[:7], "bearer ") || v[7:] != tok {
			t.Fatalf("accepted %q as %q", v, tok)
		}
		body := strings.TrimRight(tok, "=")
		if body == "" {
			t.Fatalf("accepted padding-only token %q", tok)
		}
		for _, c := range body {
			if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~+/", c) {
				t.Fatalf("accepted %q with %q", tok, c)
			}
		}
	})
}
