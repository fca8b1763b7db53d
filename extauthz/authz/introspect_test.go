package authz_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portico-io/portico/extauthz/authz"
)

// introspectionServer is an HTTPS RFC 7662 endpoint answering from a table
// of tokens. Like a real IdP it authenticates its client: a request without
// the expected client_secret_basic credentials gets 401.
type introspectionServer struct {
	*httptest.Server
	calls   atomic.Int64
	mu      sync.Mutex
	answers map[string]map[string]any
	down    bool
	hold    chan struct{} // when set, each call waits on it
	// clientID and secret are the credentials accepted; authz is the
	// Authorization header of the last call.
	clientID, secret string
	authz            string
}

const secretName = "idp-introspection"

func newIntrospectionServer(t testing.TB) *introspectionServer {
	s := &introspectionServer{answers: map[string]map[string]any{}, clientID: "portico", secret: "s3cret"}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		s.mu.Lock()
		hold, down := s.hold, s.down
		ans, ok := s.answers[r.PostFormValue("token")]
		s.authz = r.Header.Get("Authorization")
		id, secret, authOK := clientSecretBasic(r.Header.Get("Authorization"))
		authOK = authOK && id == s.clientID && secret == s.secret
		s.mu.Unlock()
		if hold != nil {
			<-hold
		}
		if down || r.Method != http.MethodPost {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		if !authOK {
			w.Header().Set("WWW-Authenticate", `Basic realm="idp"`)
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_client"})
			return
		}
		if !ok {
			ans = map[string]any{"active": false}
		}
		_ = json.NewEncoder(w).Encode(ans)
	}))
	t.Cleanup(s.Close)
	return s
}

// clientSecretBasic decodes RFC 6749 §2.3.1 credentials: Basic with the
// client id and secret each form-urlencoded before base64.
func clientSecretBasic(h string) (id, secret string, ok bool) {
	b64, found := strings.CutPrefix(h, "Basic ")
	if !found {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "", "", false
	}
	encID, encSecret, found := strings.Cut(string(raw), ":")
	if !found {
		return "", "", false
	}
	id, err1 := url.QueryUnescape(encID)
	secret, err2 := url.QueryUnescape(encSecret)
	return id, secret, err1 == nil && err2 == nil
}

func (s *introspectionServer) set(tok string, ans map[string]any) {
	s.mu.Lock()
	s.answers[tok] = ans
	s.mu.Unlock()
}

func (s *introspectionServer) lastAuthorization() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.authz
}

// writeSecret puts value in the fixture's secrets directory as name.
func (f *fixture) writeSecret(t testing.TB, name, value string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(f.secretsDir, name), []byte(value), 0o600); err != nil {
		t.Fatal(err)
	}
}

// introspectWith points the provider at is, with its client id and a
// secret file holding its secret, and pushes the policy.
func (f *fixture) introspectWith(t testing.TB, is *introspectionServer) {
	t.Helper()
	f.writeSecret(t, secretName, is.secret+"\n")
	f.prov.IntrospectionUri = is.URL
	f.prov.IntrospectionClientId = is.clientID
	f.prov.IntrospectionClientSecretRef = secretName
	f.push(t)
}

func TestIntrospection(t *testing.T) {
	f := newFixture(t)
	is := newIntrospectionServer(t)
	f.introspectWith(t, is)
	is.set("opaque-good", map[string]any{"active": true, "sub": "svc-1", "scope": "echo:read", "iss": issuer, "aud": audience, "tenant": "t9",
		"exp": f.clock.Unix(time.Hour)})

	r := check(t, f.srv, checkReq("jwt", "idp", "echo:read", bearer("opaque-good")))
	if !r.allowed || r.set["x-portico-consumer"] != "svc-1" || r.set["x-portico-tenant"] != "t9" {
		t.Fatalf("%+v", r)
	}
	check(t, f.srv, checkReq("jwt", "idp", "echo:read", bearer("opaque-good")))
	if n := is.calls.Load(); n != 1 {
		t.Fatalf("%d calls, want 1 (cached)", n)
	}
	// Cached at most 60s: the IdP deactivates the token, seen after a minute.
	is.set("opaque-good", map[string]any{"active": false})
	f.clock.Advance(61 * time.Second)
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer("opaque-good"))); r.allowed || r.code != authz.ReasonInactive {
		t.Fatalf("deactivated: %+v", r)
	}
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer("unknown-opaque"))); r.allowed || r.code != authz.ReasonInactive {
		t.Fatalf("unknown: %+v", r)
	}
	is.set("other-issuer", map[string]any{"active": true, "sub": "x", "iss": "https://evil.test", "aud": audience})
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer("other-issuer"))); r.allowed || r.code != authz.ReasonWrongIssuer {
		t.Fatalf("issuer: %+v", r)
	}
	is.set("missing-scope", map[string]any{"active": true, "sub": "x", "scope": "other", "aud": audience})
	if r := check(t, f.srv, checkReq("jwt", "idp", "echo:read", bearer("missing-scope"))); r.status != 403 {
		t.Fatalf("scope: %+v", r)
	}
	// JWTs on the same provider are still verified locally.
	before := is.calls.Load()
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(rs256(t, f.claims(nil))))); !r.allowed || is.calls.Load() != before {
		t.Fatalf("JWT went to introspection or was denied: %+v", r)
	}
	// Endpoint down: deny, never allow.
	is.mu.Lock()
	is.down = true
	is.mu.Unlock()
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer("never-seen"))); r.allowed || r.status != 503 || r.code != authz.ReasonIntrospectionDown {
		t.Fatalf("down: %+v", r)
	}
}

// TestIntrospectionAudience: a provider with audiences accepts an opaque
// token only when the IdP names one of them, as for JWTs (an answer
// without aud is not "for us"); allowAnyAudience skips the check.
func TestIntrospectionAudience(t *testing.T) {
	f := newFixture(t)
	is := newIntrospectionServer(t)
	f.introspectWith(t, is)
	is.set("no-aud", map[string]any{"active": true, "sub": "svc", "iss": issuer})
	is.set("other-aud", map[string]any{"active": true, "sub": "svc", "aud": []string{"billing"}})
	is.set("our-aud", map[string]any{"active": true, "sub": "svc", "aud": []string{"billing", audience}})
	for tok, want := range map[string]string{"no-aud": authz.ReasonWrongAudience, "other-aud": authz.ReasonWrongAudience, "our-aud": ""} {
		r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(tok)))
		if (want == "") != r.allowed || r.code != want {
			t.Errorf("%s: %+v, want %q", tok, r, want)
		}
	}
	f.prov.Audiences, f.prov.AllowAnyAudience = nil, true
	f.push(t)
	f.clock.Advance(2 * time.Minute) // past the answer cache
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer("no-aud"))); !r.allowed {
		t.Fatalf("allowAnyAudience: %+v", r)
	}
}

// TestIntrospectionSingleFlight: concurrent checks of one new opaque token
// make one call.
func TestIntrospectionSingleFlight(t *testing.T) {
	f := newFixture(t)
	is := newIntrospectionServer(t)
	f.introspectWith(t, is)
	is.set("busy", map[string]any{"active": true, "sub": "svc", "aud": audience})
	release := make(chan struct{})
	is.mu.Lock()
	is.hold = release
	is.mu.Unlock()
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer("busy"))); !r.allowed {
				t.Errorf("%+v", r)
			}
		}()
	}
	// Release once the first call is in; later arrivals either join the
	// flight or find the cache it filled.
	deadline := time.Now().Add(10 * time.Second)
	for is.calls.Load() == 0 && time.Now().Before(deadline) {
		tm := time.NewTimer(time.Millisecond)
		<-tm.C
	}
	close(release)
	wg.Wait()
	if n := is.calls.Load(); n != 1 {
		t.Fatalf("%d introspection calls for one token, want 1", n)
	}
}

// TestIntrospectionClientSecretBasic: extauthz authenticates to the
// introspection endpoint with client_secret_basic (RFC 7662 §2.1, RFC 6749
// §2.3.1: id and secret form-urlencoded, then base64), the secret read from
// the secrets directory at call time, so a rotated file is used without a
// new policy, and a missing one denies without calling the IdP.
func TestIntrospectionClientSecretBasic(t *testing.T) {
	f := newFixture(t)
	is := newIntrospectionServer(t)
	is.clientID, is.secret = "portico client:1", "s3cr:t +/&é%"
	f.introspectWith(t, is)
	is.set("tok-1", map[string]any{"active": true, "sub": "svc", "aud": audience})
	is.set("tok-2", map[string]any{"active": true, "sub": "svc", "aud": audience})
	is.set("tok-3", map[string]any{"active": true, "sub": "svc", "aud": audience})

	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer("tok-1"))); !r.allowed {
		t.Fatalf("with the right credentials: %+v (IdP saw %q)", r, is.lastAuthorization())
	}
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("portico+client%3A1:s3cr%3At+%2B%2F%26%C3%A9%25"))
	if got := is.lastAuthorization(); got != want {
		t.Fatalf("Authorization %q, want %q", got, want)
	}

	// Rotation: the IdP and the file change; the next call uses the new secret.
	is.mu.Lock()
	is.secret = "rotated"
	is.mu.Unlock()
	f.writeSecret(t, secretName, "rotated")
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer("tok-2"))); !r.allowed {
		t.Fatalf("after rotation: %+v", r)
	}

	// The IdP refuses the client: deny (the token could not be checked).
	f.writeSecret(t, secretName, "wrong")
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer("tok-3"))); r.allowed || r.status != 503 || r.code != authz.ReasonIntrospectionDown {
		t.Fatalf("IdP refused the client: %+v", r)
	}
	if strings.Contains(fmt.Sprint(check(t, f.srv, checkReq("jwt", "idp", "", bearer("tok-3")))), "wrong") {
		t.Fatal("the secret leaked into the response")
	}

	// No secret file: deny without calling the IdP.
	if err := os.Remove(filepath.Join(f.secretsDir, secretName)); err != nil {
		t.Fatal(err)
	}
	before := is.calls.Load()
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer("tok-3"))); r.allowed || r.status != 503 || r.code != authz.ReasonIntrospectionDown {
		t.Fatalf("missing secret: %+v", r)
	}
	if n := is.calls.Load(); n != before {
		t.Fatalf("the IdP was called without credentials (%d calls)", n-before)
	}
}

// TestIntrospectionRateLimit: introspection calls go through a per-provider
// token bucket, so random bearer strings cannot push more than the
// configured rate onto the IdP. Over the limit extauthz denies with 503
// (fail closed) and counts the refusal; tokens already answered keep
// working from the cache.
func TestIntrospectionRateLimit(t *testing.T) {
	f := newFixture(t)
	is := newIntrospectionServer(t)
	f.prov.IntrospectionRequestsPerSecond, f.prov.IntrospectionBurst = 1, 3
	f.introspectWith(t, is)
	is.set("good", map[string]any{"active": true, "sub": "svc", "aud": audience, "exp": f.clock.Unix(time.Hour)})

	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer("good"))); !r.allowed {
		t.Fatalf("good: %+v", r)
	}
	limited := 0
	for i := range 9 {
		r := check(t, f.srv, checkReq("jwt", "idp", "", bearer(fmt.Sprintf("random-%d", i))))
		switch {
		case r.allowed:
			t.Fatalf("random token %d allowed", i)
		case r.code == authz.ReasonIntrospectionRateLimited:
			if r.status != http.StatusServiceUnavailable {
				t.Fatalf("rate limited with status %d", r.status)
			}
			limited++
		case r.code != authz.ReasonInactive:
			t.Fatalf("random token %d: %+v", i, r)
		}
	}
	if n := is.calls.Load(); n != 3 || limited != 7 {
		t.Fatalf("%d IdP calls and %d refusals, want 3 (the burst) and 7", n, limited)
	}
	if got := counter(t, f.reg, "portico_extauthz_introspections_total", map[string]string{"result": "rate_limited"}); got != 7 {
		t.Fatalf("rate_limited counter %v, want 7", got)
	}
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer("good"))); !r.allowed {
		t.Fatalf("a cached token while limited: %+v", r)
	}
	// One second refills one call.
	f.clock.Advance(time.Second)
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer("random-after-1s"))); r.code != authz.ReasonInactive {
		t.Fatalf("after a second: %+v", r)
	}
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer("random-after-1s-2"))); r.code != authz.ReasonIntrospectionRateLimited {
		t.Fatalf("second call after a second: %+v", r)
	}
	if n := is.calls.Load(); n != 4 {
		t.Fatalf("%d IdP calls, want 4", n)
	}
	// A new policy with the same provider keeps the bucket (no refill by push).
	f.push(t)
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer("random-after-push"))); r.code != authz.ReasonIntrospectionRateLimited {
		t.Fatalf("after a push: %+v", r)
	}
}
