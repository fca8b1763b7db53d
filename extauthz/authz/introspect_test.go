package authz_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portico-io/portico/extauthz/authz"
)

// introspectionServer answers RFC 7662 requests from a table of tokens.
type introspectionServer struct {
	*httptest.Server
	calls   atomic.Int64
	mu      sync.Mutex
	answers map[string]map[string]any
	down    bool
	hold    chan struct{} // when set, each call waits on it
}

func newIntrospectionServer(t testing.TB) *introspectionServer {
	s := &introspectionServer{answers: map[string]map[string]any{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		s.mu.Lock()
		hold, down := s.hold, s.down
		ans, ok := s.answers[r.PostFormValue("token")]
		s.mu.Unlock()
		if hold != nil {
			<-hold
		}
		if down || r.Method != http.MethodPost {
			http.Error(w, "down", http.StatusBadGateway)
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

func (s *introspectionServer) set(tok string, ans map[string]any) {
	s.mu.Lock()
	s.answers[tok] = ans
	s.mu.Unlock()
}

func TestIntrospection(t *testing.T) {
	f := newFixture(t)
	is := newIntrospectionServer(t)
	f.prov.IntrospectionUri = is.URL
	f.push(t)
	is.set("opaque-good", map[string]any{"active": true, "sub": "svc-1", "scope": "echo:read", "iss": issuer, "tenant": "t9",
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
	is.set("other-issuer", map[string]any{"active": true, "sub": "x", "iss": "https://evil.test"})
	if r := check(t, f.srv, checkReq("jwt", "idp", "", bearer("other-issuer"))); r.allowed || r.code != authz.ReasonWrongIssuer {
		t.Fatalf("issuer: %+v", r)
	}
	is.set("missing-scope", map[string]any{"active": true, "sub": "x", "scope": "other"})
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

// TestIntrospectionSingleFlight: concurrent checks of one new opaque token
// make one call.
func TestIntrospectionSingleFlight(t *testing.T) {
	f := newFixture(t)
	is := newIntrospectionServer(t)
	f.prov.IntrospectionUri = is.URL
	f.push(t)
	is.set("busy", map[string]any{"active": true, "sub": "svc"})
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
