package authn_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/authn"
)

// memStore is a TokenStore for tests, counting touches.
type memStore struct {
	mu      sync.Mutex
	tokens  map[string]authn.StoredToken
	touches []time.Time
	failGet error
}

func newMemStore() *memStore { return &memStore{tokens: map[string]authn.StoredToken{}} }

func (s *memStore) add(st authn.StoredToken) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[st.ID] = st
}

func (s *memStore) LookupToken(_ context.Context, id string) (authn.StoredToken, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failGet != nil {
		return authn.StoredToken{}, s.failGet
	}
	st, ok := s.tokens[id]
	if !ok {
		return authn.StoredToken{}, authn.ErrTokenNotFound
	}
	return st, nil
}

func (s *memStore) TouchToken(_ context.Context, id string, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.tokens[id]
	st.LastUsed = at
	s.tokens[id] = st
	s.touches = append(s.touches, at)
	return nil
}

func (s *memStore) touchCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.touches)
}

var tokenRE = regexp.MustCompile(`^ptk_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$`)

func TestNewToken(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		tok := authn.NewToken()
		if !tokenRE.MatchString(tok.Plaintext) || len(tok.Plaintext) != authn.TokenLen {
			t.Fatalf("bad token %q", tok.Plaintext)
		}
		id, err := authn.ParseTokenID(tok.Plaintext)
		if err != nil || id != tok.ID || tok.Plaintext[4:20] != tok.ID {
			t.Fatalf("ParseTokenID = %q, %v; want %q", id, err, tok.ID)
		}
		if tok.Hash != authn.HashToken(tok.Plaintext) {
			t.Fatal("hash is not SHA-256 of the plaintext")
		}
		if seen[tok.ID] {
			t.Fatal("duplicate id")
		}
		seen[tok.ID] = true
	}
}

func TestParseTokenIDRefusals(t *testing.T) {
	good := authn.NewToken().Plaintext
	for name, s := range map[string]string{
		"empty":         "",
		"prefix only":   "ptk_",
		"short":         good[:len(good)-1],
		"long":          good + "A",
		"upper hex id":  "ptk_0123456789ABCDEF_" + good[21:],
		"non-hex id":    "ptk_0123456789abcdeg_" + good[21:],
		"no separator":  good[:20] + "." + good[21:],
		"wrong prefix":  "ptx" + good[3:],
		"std base64":    good[:21] + "+" + good[22:],
		"padded secret": good[:len(good)-1] + "=",
		// The last character carries 2 unused bits; Strict() refuses them set.
		"non-canonical": good[:len(good)-1] + flipLowBits(good[len(good)-1]),
	} {
		if _, err := authn.ParseTokenID(s); !errors.Is(err, authn.ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
}

func flipLowBits(c byte) string {
	const alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alpha, c)
	return string(alpha[i^1])
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func requestWith(tok string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if tok != "" {
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	return r
}

func issue(s *memStore, mod func(*authn.StoredToken)) string {
	tok := authn.NewToken()
	st := authn.StoredToken{ID: tok.ID, Hash: tok.Hash, Name: "ci", Roles: []string{"editor"}, Tenant: "acme", Keyspaces: []string{"ks1"}}
	if mod != nil {
		mod(&st)
	}
	s.add(st)
	return tok.Plaintext
}

func TestAPITokens(t *testing.T) {
	clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	store := newMemStore()
	a, err := authn.New(authn.Config{Tokens: store, TimeNow: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	good := issue(store, nil)
	p, err := a.Authenticate(requestWith(good))
	if err != nil {
		t.Fatal(err)
	}
	want := authn.Principal{Kind: authn.KindToken, ID: good[4:20], Name: "ci", Roles: []string{"editor"}, Tenant: "acme", Keyspaces: []string{"ks1"}}
	if p.String() != want.String() || p.Name != want.Name || strings.Join(p.Roles, ",") != "editor" || p.Tenant != "acme" || !p.AllowsKeyspace("ks1") || p.AllowsKeyspace("ks2") {
		t.Fatalf("principal %+v, want %+v", p, want)
	}

	other := authn.NewToken()
	expired := issue(store, func(st *authn.StoredToken) { st.ExpiresAt = clk.Now() })
	notYetExpired := issue(store, func(st *authn.StoredToken) { st.ExpiresAt = clk.Now().Add(time.Second) })
	revoked := issue(store, func(st *authn.StoredToken) { st.Revoked = true })
	// Right id, another token's secret.
	wrongSecret := good[:21] + other.Plaintext[21:]
	for _, tc := range []struct {
		name string
		tok  string
		err  error
	}{
		{"unknown id", other.Plaintext, authn.ErrInvalidToken},
		{"wrong secret", wrongSecret, authn.ErrInvalidToken},
		{"expired at the instant", expired, authn.ErrExpired},
		{"revoked", revoked, authn.ErrRevoked},
		{"malformed ptk", good[:len(good)-2], authn.ErrMalformed},
		{"JWT not configured", "a.b.c", authn.ErrInvalidToken},
	} {
		if _, err := a.Authenticate(requestWith(tc.tok)); !errors.Is(err, tc.err) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.err)
		} else if len(tc.tok) > 21 && strings.Contains(err.Error(), tc.tok[21:]) {
			t.Errorf("%s: error %q reveals the secret", tc.name, err)
		}
	}
	if _, err := a.Authenticate(requestWith(notYetExpired)); err != nil {
		t.Errorf("token expiring in 1s refused: %v", err)
	}

	// Revocation takes effect on the next request.
	id := good[4:20]
	st, _ := store.LookupToken(context.Background(), id)
	st.Revoked = true
	store.add(st)
	if _, err := a.Authenticate(requestWith(good)); !errors.Is(err, authn.ErrRevoked) {
		t.Fatalf("after revocation: %v", err)
	}

	store.failGet = errors.New("db down")
	if _, err := a.Authenticate(requestWith(notYetExpired)); !errors.Is(err, authn.ErrUnavailable) {
		t.Fatalf("store down: %v", err)
	}
}

func TestAPITokensRefusedWithoutStore(t *testing.T) {
	a, err := authn.New(authn.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(requestWith(authn.NewToken().Plaintext)); !errors.Is(err, authn.ErrInvalidToken) {
		t.Fatalf("err = %v", err)
	}
	if _, err := a.Authenticate(requestWith("")); !errors.Is(err, authn.ErrNoCredentials) {
		t.Fatalf("no credentials: %v", err)
	}
}

// Last use is written at most once per LastUsedInterval per token, however
// many requests (concurrent ones included) use it.
func TestLastUsedThrottled(t *testing.T) {
	clk := &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	store := newMemStore()
	a, err := authn.New(authn.Config{Tokens: store, TimeNow: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	tok1, tok2 := issue(store, nil), issue(store, nil)
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if _, err := a.Authenticate(requestWith(tok1)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := store.touchCount(); n != 1 {
		t.Fatalf("%d writes after a burst, want 1", n)
	}
	clk.Advance(authn.LastUsedInterval - time.Second)
	_, _ = a.Authenticate(requestWith(tok1))
	if n := store.touchCount(); n != 1 {
		t.Fatalf("%d writes within the interval, want 1", n)
	}
	_, _ = a.Authenticate(requestWith(tok2))
	if n := store.touchCount(); n != 2 {
		t.Fatalf("another token: %d writes, want 2", n)
	}
	clk.Advance(time.Second)
	_, _ = a.Authenticate(requestWith(tok1))
	if n := store.touchCount(); n != 3 {
		t.Fatalf("after the interval: %d writes, want 3", n)
	}
	// A second authenticator (another replica) sees the stored last use.
	b, _ := authn.New(authn.Config{Tokens: store, TimeNow: clk.Now})
	_, _ = b.Authenticate(requestWith(tok1))
	if n := store.touchCount(); n != 3 {
		t.Fatalf("other replica wrote again: %d writes, want 3", n)
	}
}
