package authn_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/authn"
)

func TestCheckKeyspace(t *testing.T) {
	for _, ks := range []string{"orders", "cache", "leader.election", "a_b-c.D9", strings.Repeat("k", authn.MaxKeyspaceLen)} {
		if err := authn.CheckKeyspace(ks); err != nil {
			t.Errorf("%q: %v", ks, err)
		}
	}
	for _, tc := range []struct{ ks, reason string }{
		{"", "must be 1-64 bytes"},
		{strings.Repeat("k", authn.MaxKeyspaceLen+1), "must be 1-64 bytes"},
		{"a:b", "only letters"},
		{"a/b", "only letters"},
		{"a b", "only letters"},
		{"caché", "only letters"},
		{"*", "only letters"},
	} {
		err := authn.CheckKeyspace(tc.ks)
		var ke *authn.KeyspaceError
		if !errors.Is(err, authn.ErrInvalidKeyspace) || !errors.As(err, &ke) || ke.Keyspace != tc.ks || !strings.HasPrefix(ke.Reason, tc.reason) {
			t.Errorf("%q: %v, want a KeyspaceError %q", tc.ks, err, tc.reason)
		}
	}
}

func TestTokenRequestLimits(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, name := range []string{"ci-deploy", strings.Repeat("n", authn.MaxTokenNameLen)} {
		if err := authn.CheckTokenName(name); err != nil {
			t.Errorf("name %.20q: %v", name, err)
		}
	}
	for _, name := range []string{"", "  \t", strings.Repeat("n", authn.MaxTokenNameLen+1)} {
		if err := authn.CheckTokenName(name); !errors.Is(err, authn.ErrBadTokenRequest) {
			t.Errorf("name %.20q: %v, want ErrBadTokenRequest", name, err)
		}
	}
	for _, at := range []time.Time{now.Add(time.Second), now.Add(authn.MaxTokenTTL)} {
		if err := authn.CheckTokenExpiry(at, now); err != nil {
			t.Errorf("expiry %s: %v", at, err)
		}
	}
	// A zero time is refused: "never" is no expiry, not year 1 (which would
	// show as expired while working forever).
	for _, at := range []time.Time{{}, now, now.Add(-time.Hour), now.Add(authn.MaxTokenTTL + time.Second)} {
		if err := authn.CheckTokenExpiry(at, now); !errors.Is(err, authn.ErrBadTokenRequest) {
			t.Errorf("expiry %s: %v, want ErrBadTokenRequest", at, err)
		}
	}
}

func TestAuthor(t *testing.T) {
	for _, tc := range []struct {
		p    authn.Principal
		want string
	}{
		{authn.Principal{}, ""},
		{authn.Principal{Kind: authn.KindToken, ID: "0123456789abcdef", Name: "ci"}, "token:0123456789abcdef (ci)"},
		{authn.Principal{Kind: authn.KindJWT, ID: "u-1", Name: "u-1"}, "jwt:u-1"},
		{authn.Principal{Kind: authn.KindCert, ID: "spiffe://portico.local/operator/alice"}, "cert:spiffe://portico.local/operator/alice"},
	} {
		if got := tc.p.Author(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.p, got, tc.want)
		}
	}
}
