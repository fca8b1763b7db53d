package api

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/internal/authz/authztest"
	"github.com/portico-io/portico/kvnode/apitoken"
	"github.com/portico-io/portico/kvnode/cp"
)

// fakeTokens is a token table: on the leader (leader == "") it keeps
// created tokens in memory; on a follower every write is
// *cp.NotLeaderError naming leader. It records the revisions waited for.
type fakeTokens struct {
	mu      sync.Mutex
	leader  string
	rev     uint64
	tokens  map[string]apitoken.Token
	waited  []uint64
	waitErr error
}

func (f *fakeTokens) notLeader() error {
	return &cp.NotLeaderError{LeaderID: "L", LeaderHTTPAddr: f.leader}
}

func (f *fakeTokens) Create(_ context.Context, t apitoken.Token, _ [sha256.Size]byte) (apitoken.Token, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leader != "" {
		return apitoken.Token{}, 0, f.notLeader()
	}
	if f.tokens == nil {
		f.tokens = map[string]apitoken.Token{}
	}
	f.rev += 10
	f.tokens[t.ID] = t
	return t, f.rev, nil
}

func (f *fakeTokens) Revoke(_ context.Context, id, by string) (apitoken.Token, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leader != "" {
		return apitoken.Token{}, 0, f.notLeader()
	}
	t, ok := f.tokens[id]
	if !ok {
		return t, 0, apitoken.ErrNotFound
	}
	now := time.Now()
	t.RevokedAt, t.RevokedBy = &now, by
	f.tokens[id] = t
	f.rev += 10
	return t, f.rev, nil
}

func (f *fakeTokens) Get(id string) (apitoken.Token, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tokens[id]
	if !ok {
		return t, apitoken.ErrNotFound
	}
	return t, nil
}

func (f *fakeTokens) List(string, int) ([]apitoken.Token, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []apitoken.Token{}
	for _, t := range f.tokens {
		out = append(out, t)
	}
	return out, "", nil
}

func (f *fakeTokens) WaitApplied(_ context.Context, rev uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waited = append(f.waited, rev)
	return f.waitErr
}

func (f *fakeTokens) waitedFor() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.waited)
}

// A follower forwards token writes to the leader with the caller's
// credential, relays the answer (the secret too, once) and waits until it
// has applied the leader's revision first; a revocation it cannot apply in
// time is 503, a creation is relayed anyway (its secret would be lost).
func TestTokenWritesForwardAndSettle(t *testing.T) {
	tokens := authztest.NewTokens()
	leaderTokens := &fakeTokens{}
	leaderAPI := newTestAPI(t, Config{CP: fakeCP{}, Tokens: leaderTokens}, tokens)
	leader := httptest.NewServer(leaderAPI)
	defer leader.Close()
	addr := strings.TrimPrefix(leader.URL, "http://")
	ft := &fakeTokens{leader: addr}
	follower := newTestAPI(t, Config{CP: followerCP{leader: addr}, Tokens: ft}, tokens)
	admin := tokens.Token(authz.Admin)

	w := call(follower, admin, "POST", TokensPrefix, `{"name":"orders-app","roles":["editor"],"keyspaces":["orders"]}`)
	var created CreatedToken
	if err := json.Unmarshal(w.Body.Bytes(), &created); err != nil || w.Code != http.StatusCreated || w.Header().Get(HeaderForwarded) != "L" {
		t.Fatalf("forwarded create: %d %s %v", w.Code, w.Body, w.Header())
	}
	if !strings.HasPrefix(created.Secret, authn.TokenPrefix+created.ID+"_") || strings.Join(created.Keyspaces, ",") != "orders" ||
		w.Header().Get("Location") != TokensPrefix+"/"+created.ID || !strings.HasPrefix(created.CreatedBy, "token:") {
		t.Fatalf("created %+v, Location %q", created, w.Header().Get("Location"))
	}
	if got := ft.waitedFor(); len(got) != 1 || got[0] != 10 {
		t.Fatalf("follower waited for %v, want the leader's revision 10", got)
	}

	w = call(follower, admin, "DELETE", TokensPrefix+"/"+created.ID, "")
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"revokedAt"`) {
		t.Fatalf("forwarded revoke: %d %s", w.Code, w.Body)
	}
	if got := ft.waitedFor(); len(got) != 2 || got[1] != 20 {
		t.Fatalf("follower waited for %v, want the leader's revision 20", got)
	}

	ft.waitErr = context.DeadlineExceeded
	w = call(follower, admin, "DELETE", TokensPrefix+"/"+created.ID, "")
	var e struct{ Error ErrBody }
	if _ = json.Unmarshal(w.Body.Bytes(), &e); w.Code != http.StatusServiceUnavailable || e.Error.Code != "not_applied" {
		t.Fatalf("revoke not applied here: %d %s", w.Code, w.Body)
	}
	if w = call(follower, admin, "POST", TokensPrefix, `{"name":"n","roles":["viewer"]}`); w.Code != http.StatusCreated || !strings.Contains(w.Body.String(), `"token":"ptk_`) {
		t.Fatalf("create not yet applied here: %d %s, want the leader's 201", w.Code, w.Body)
	}
	// Refused on the follower (escalation): never forwarded.
	n := len(ft.waitedFor())
	if w = call(follower, tokens.Token(authz.SecurityAdmin), "POST", TokensPrefix, `{"name":"n","roles":["admin"]}`); w.Code != http.StatusForbidden {
		t.Fatalf("security-admin minting an admin token: %d %s", w.Code, w.Body)
	}
	if len(ft.waitedFor()) != n || len(leaderTokens.tokens) != 2 {
		t.Fatal("a refused creation reached the leader")
	}
}

// The token routes: validation naming the field, no escalation, the
// secret only in the creation answer, 404 for unknown or malformed ids,
// 501 without the consensus tier.
func TestTokenRoutes(t *testing.T) {
	tokens := authztest.NewTokens()
	ft := &fakeTokens{}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	a := newTestAPI(t, Config{CP: fakeCP{}, Tokens: ft, Now: func() time.Time { return now }}, tokens)
	admin, sec := tokens.Token(authz.Admin), tokens.Token(authz.SecurityAdmin)
	for _, tc := range []struct {
		tok, body   string
		status      int
		code, field string
	}{
		{admin, `{"name":"","roles":["viewer"]}`, 400, "invalid_name", "name"},
		{admin, `{"name":"n","roles":[]}`, 400, "invalid_roles", "roles"},
		{admin, `{"name":"n","roles":["root"]}`, 400, "invalid_roles", "roles"},
		{admin, `{"name":"n","roles":["viewer"],"keyspaces":["a:b"]}`, 400, "invalid_keyspace", "keyspaces[0]"},
		{admin, `{"name":"n","roles":["viewer"],"keyspaces":["orders","__tokens"]}`, 400, "invalid_keyspace", "keyspaces[1]"},
		{admin, `{"name":"n","roles":["viewer"],"keyspaces":[]}`, 400, "invalid_keyspace", "keyspaces"},
		{admin, `{"name":"n","roles":["viewer"],"expiresAt":"2029-12-31T00:00:00Z"}`, 400, "invalid_expires_at", "expiresAt"},
		{admin, `{"name":"n","roles":["viewer"],"expiresAt":"2032-01-01T00:00:00Z"}`, 400, "invalid_expires_at", "expiresAt"},
		{admin, `{"name":"n","roles":["viewer"],"tenant":"acme"}`, 400, "invalid_body", "body"},
		{sec, `{"name":"n","roles":["admin"]}`, 403, "forbidden", "roles"},
		{sec, `{"name":"n","roles":["editor"],"keyspaces":["orders"]}`, 403, "forbidden", "roles"},
	} {
		w := call(a, tc.tok, "POST", TokensPrefix, tc.body)
		var e struct{ Error ErrBody }
		if _ = json.Unmarshal(w.Body.Bytes(), &e); w.Code != tc.status || e.Error.Code != tc.code || e.Error.Field != tc.field {
			t.Errorf("POST %s: %d %s, want %d %s on %s", tc.body, w.Code, w.Body, tc.status, tc.code, tc.field)
		}
	}
	if len(ft.tokens) != 0 {
		t.Fatalf("refused requests stored %d tokens", len(ft.tokens))
	}

	// A security admin mints a confined viewer token.
	w := call(a, sec, "POST", TokensPrefix, `{"name":"reader","roles":["viewer"],"keyspaces":["orders","carts","orders"],"expiresAt":"2030-01-02T01:00:00+01:00"}`)
	var created CreatedToken
	if err := json.Unmarshal(w.Body.Bytes(), &created); err != nil || w.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	if strings.Join(created.Keyspaces, ",") != "carts,orders" || !created.CreatedAt.Equal(now) || created.ExpiresAt.Location() != time.UTC ||
		!created.ExpiresAt.Equal(time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC)) || created.CreatedBy != "token:"+idOf(t, sec)+" (authztest-security-admin)" {
		t.Fatalf("created %+v", created)
	}
	for _, path := range []string{TokensPrefix, TokensPrefix + "/" + created.ID} {
		w := call(a, sec, "GET", path, "")
		if w.Code != http.StatusOK || strings.Contains(w.Body.String(), created.Secret) || strings.Contains(w.Body.String(), `"token"`) || !strings.Contains(w.Body.String(), created.ID) {
			t.Fatalf("GET %s: %d %s (the secret must appear only in the creation answer)", path, w.Code, w.Body)
		}
	}
	for _, path := range []string{TokensPrefix + "/0123456789abcdef", TokensPrefix + "/XYZ", TokensPrefix + "/0123456789ABCDEF"} {
		if w := call(a, admin, "GET", path, ""); w.Code != http.StatusNotFound {
			t.Errorf("GET %s: %d", path, w.Code)
		}
		if w := call(a, admin, "DELETE", path, ""); w.Code != http.StatusNotFound {
			t.Errorf("DELETE %s: %d", path, w.Code)
		}
	}
	if w := call(a, admin, "GET", TokensPrefix+"?limit=0", ""); w.Code != http.StatusBadRequest {
		t.Errorf("limit=0: %d", w.Code)
	}

	ringOnly := newTestAPI(t, Config{KV: fakeKV{}, Tokens: ft}, tokens)
	if w := call(ringOnly, admin, "GET", TokensPrefix, ""); w.Code != http.StatusNotImplemented {
		t.Errorf("without the consensus tier: %d %s", w.Code, w.Body)
	}
}

func idOf(t *testing.T, tok string) string {
	t.Helper()
	id, err := authn.ParseTokenID(tok)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// The keyspace holding the tokens is refused (403 reserved_keyspace) to
// every data route, whoever asks: admins too.
func TestReservedKeyspace(t *testing.T) {
	tokens := authztest.NewTokens()
	a := newTestAPI(t, Config{KV: fakeKV{}, CP: fakeCP{}, CPKeyspaces: []string{"locks"}, Admin: fakeAdmin{}, Tokens: &fakeTokens{}}, tokens)
	ks := apitoken.Keyspace
	for _, tc := range []struct{ method, path, body, field string }{
		{"GET", "/v1/kv/" + ks + ":0123456789abcdef", "", "key"},
		{"PUT", "/v1/kv/" + ks + ":0123456789abcdef", "v", "key"},
		{"DELETE", "/v1/kv/" + ks + ":x", "", "key"},
		{"GET", "/v1/kv/" + ks, "", "key"},
		{"POST", "/v1/kv:batchGet", `{"keys":["locks:a","` + ks + `:x"]}`, "keys[1]"},
		{"GET", "/v1/cp/" + ks + "/0123456789abcdef", "", "keyspace"},
		{"PUT", "/v1/cp/" + ks + "/x", "v", "keyspace"},
		{"DELETE", "/v1/cp/" + ks + "/x", "", "keyspace"},
		{"GET", "/v1/cp/" + ks + "?watch=true", "", "keyspace"},
		{"POST", "/v1/cp:txn", `{"ops":[{"op":"put","keyspace":"locks","key":"a"},{"op":"delete","keyspace":"` + ks + `","key":"x"}]}`, "ops[1].keyspace"},
		{"POST", "/v1/cp:txn", `{"compare":[{"keyspace":"` + ks + `","key":"x","revision":0}],"ops":[{"op":"put","keyspace":"locks","key":"a"}]}`, "compare[0].keyspace"},
	} {
		w := call(a, tokens.Token(authz.Admin), tc.method, tc.path, tc.body)
		var e struct{ Error ErrBody }
		if _ = json.Unmarshal(w.Body.Bytes(), &e); w.Code != http.StatusForbidden || e.Error.Code != "reserved_keyspace" || e.Error.Field != tc.field {
			t.Errorf("%s %s as admin: %d %s, want 403 reserved_keyspace on %s", tc.method, tc.path, w.Code, w.Body, tc.field)
		}
	}
	if _, err := ParseKeyspace(ks); err == nil {
		t.Fatal("ParseKeyspace accepts the reserved keyspace")
	}
}

// FuzzParseTokenRequest drives the token creation body: it never panics,
// and what it accepts is a grantable, well-formed token request.
func FuzzParseTokenRequest(f *testing.F) {
	f.Add(`{"name":"ci","roles":["viewer"],"keyspaces":["orders"]}`, "security-admin")
	f.Add(`{"name":"ci","roles":["admin"],"expiresAt":"2030-01-01T01:00:00Z"}`, "admin")
	f.Add(`{"name":" ","roles":["editor","viewer"],"keyspaces":["b","a","b"]}`, "admin")
	f.Add(`{"name":"x","roles":null,"keyspaces":[]}`, "viewer")
	f.Add(`[]`, "admin")
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body, role string) {
		caller := authn.Principal{Kind: authn.KindToken, ID: "0123456789abcdef", Roles: []string{role}}
		req, err := ParseTokenRequest([]byte(body), caller, now)
		if err != nil {
			var br *BadRequest
			if !errors.As(err, &br) || br.Field == "" || (br.Status != http.StatusBadRequest && br.Status != http.StatusForbidden) {
				t.Fatalf("refusal %v is not a 400/403 naming a field", err)
			}
			return
		}
		if authn.CheckTokenName(req.Name) != nil || len(req.Roles) == 0 || authz.CheckGrant(caller, req.Roles) != nil {
			t.Fatalf("accepted %+v", req)
		}
		if !slices.IsSorted(req.Keyspaces) || len(slices.Compact(slices.Clone(req.Keyspaces))) != len(req.Keyspaces) {
			t.Fatalf("keyspaces %q not sorted and unique", req.Keyspaces)
		}
		for _, ks := range req.Keyspaces {
			if _, err := ParseKeyspace(ks); err != nil {
				t.Fatalf("accepted keyspace %q: %v", ks, err)
			}
		}
		if req.ExpiresAt != nil && authn.CheckTokenExpiry(*req.ExpiresAt, now) != nil {
			t.Fatalf("accepted expiry %s", req.ExpiresAt)
		}
	})
}

// certCaller authenticates every request as an operator certificate.
type certCaller struct{}

func (certCaller) Authenticate(*http.Request) (authn.Principal, error) {
	return authn.Principal{Kind: authn.KindCert, ID: "spiffe://portico.local/operator/alice", Name: "alice", Roles: []string{"admin"}}, nil
}

// A follower forwarding for a caller that authenticated with a certificate
// names it; the leader records it as the author only when a kvnode
// certificate forwarded the request.
func TestTokenAuthorOfAForwardedCertificateCaller(t *testing.T) {
	var got http.Header
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.WriteHeader(http.StatusCreated)
	}))
	defer leader.Close()
	addr := strings.TrimPrefix(leader.URL, "http://")
	follower, err := New(Config{CP: followerCP{leader: addr}, Tokens: &fakeTokens{leader: addr}, Auth: certCaller{}})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("POST", TokensPrefix, strings.NewReader(`{"name":"n","roles":["viewer"]}`))
	req.Host = "localhost"
	// A verified client certificate (certCaller says whose).
	req.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{}}}}
	w := httptest.NewRecorder()
	if follower.ServeHTTP(w, req); w.Code != http.StatusCreated {
		t.Fatalf("forwarded: %d %s", w.Code, w.Body)
	}
	if got.Get(HeaderOnBehalfOf) != "cert:spiffe://portico.local/operator/alice (alice)" || got.Get("Authorization") != "" {
		t.Fatalf("leader saw %v", got)
	}

	kvnode := authn.Principal{Kind: authn.KindCert, ID: "spiffe://portico.local/kvnode/n1", Name: "n1", Roles: []string{"admin"}}
	operator := authn.Principal{Kind: authn.KindCert, ID: "spiffe://portico.local/operator/bob", Name: "bob", Roles: []string{"admin"}}
	tok := authn.Principal{Kind: authn.KindToken, ID: "0123456789abcdef", Name: "ci", Roles: []string{"admin"}}
	for _, tc := range []struct {
		p                   authn.Principal
		forwarded, behalfOf string
		want                string
	}{
		{kvnode, "1", "cert:spiffe://portico.local/operator/alice (alice)", "cert:spiffe://portico.local/operator/alice (alice) via cert:spiffe://portico.local/kvnode/n1 (n1)"},
		{kvnode, "", "cert:spiffe://portico.local/operator/alice (alice)", "cert:spiffe://portico.local/kvnode/n1 (n1)"},
		{kvnode, "1", "", "cert:spiffe://portico.local/kvnode/n1 (n1)"},
		{operator, "1", "someone else", "cert:spiffe://portico.local/operator/bob (bob)"},
		{tok, "1", "someone else", "token:0123456789abcdef (ci)"},
	} {
		r := httptest.NewRequest("POST", TokensPrefix, nil)
		r.Header.Set(HeaderForwarded, tc.forwarded)
		r.Header.Set(HeaderOnBehalfOf, tc.behalfOf)
		r = r.WithContext(authn.WithPrincipal(r.Context(), tc.p))
		if a := author(r); a != tc.want {
			t.Errorf("%s forwarded=%q on behalf of %q: author %q, want %q", tc.p, tc.forwarded, tc.behalfOf, a, tc.want)
		}
	}
}
