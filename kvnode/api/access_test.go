package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/internal/authz/authztest"
	"github.com/portico-io/portico/kvnode/antientropy"
	"github.com/portico-io/portico/kvnode/coordinator"
	"github.com/portico-io/portico/kvnode/cp"
)

// fakeKV is a ring that stores nothing: reads find nothing, writes ack.
type fakeKV struct{}

func (fakeKV) Get(context.Context, []byte, coordinator.Level) (coordinator.ReadResult, error) {
	return coordinator.ReadResult{Acks: 1, N: 1}, nil
}
func (fakeKV) Put(context.Context, []byte, []byte, coordinator.WriteOptions) (coordinator.WriteResult, error) {
	return coordinator.WriteResult{Acks: 1, N: 1}, nil
}
func (fakeKV) Delete(context.Context, []byte, coordinator.WriteOptions) (coordinator.WriteResult, error) {
	return coordinator.WriteResult{Acks: 1, N: 1}, nil
}
func (fakeKV) BatchGet(_ context.Context, keys [][]byte, _ coordinator.Level) ([]coordinator.BatchResult, error) {
	out := make([]coordinator.BatchResult, len(keys))
	for i, k := range keys {
		out[i].Key = k
	}
	return out, nil
}
func (fakeKV) VectorClocks([]byte) bool { return false }

// fakeCP is a consensus tier that leads and accepts everything.
type fakeCP struct{}

func (fakeCP) Get(context.Context, string, string, bool) (cp.Entry, error) {
	return cp.Entry{}, cp.ErrNotFound
}
func (fakeCP) Put(context.Context, string, string, []byte, *uint64, uint64) (cp.Entry, error) {
	return cp.Entry{Revision: 1}, nil
}
func (fakeCP) Delete(context.Context, string, string, *uint64) (uint64, error) { return 1, nil }
func (fakeCP) SaveSnapshot(context.Context, io.Writer) (uint64, error)         { return 1, nil }
func (fakeCP) RestoreSnapshot(context.Context, []byte) (uint64, error)         { return 1, nil }
func (fakeCP) Members(context.Context) ([]cp.Member, error)                    { return nil, nil }
func (fakeCP) AddVoter(context.Context, string, string) error                  { return nil }
func (fakeCP) RemoveServer(context.Context, string) error                      { return nil }
func (fakeCP) Txn(context.Context, []cp.Compare, []cp.TxnOp) (uint64, error)   { return 1, nil }
func (fakeCP) GrantLease(context.Context, int64) (uint64, error)               { return 1, nil }
func (fakeCP) KeepAlive(context.Context, uint64) (int64, error)                { return 5, nil }
func (fakeCP) RevokeLease(context.Context, uint64) error                       { return nil }
func (fakeCP) Watch(context.Context, string, string, uint64, func([]cp.Event) error) error {
	return cp.ErrClosed
}

// fakeAdmin is a node whose admin calls all succeed.
type fakeAdmin struct{}

func (fakeAdmin) Ring() RingView      { return RingView{} }
func (fakeAdmin) Members() MemberList { return MemberList{} }
func (fakeAdmin) Repair(context.Context) (antientropy.Result, error) {
	return antientropy.Result{}, nil
}
func (fakeAdmin) RepairStatus() RepairStatus         { return RepairStatus{} }
func (fakeAdmin) Join(context.Context) error         { return nil }
func (fakeAdmin) Decommission(context.Context) error { return nil }
func (fakeAdmin) Backup(context.Context) (Archive, error) {
	return fakeArchive{}, nil
}
func (fakeAdmin) Load(context.Context, io.Reader) (LoadResult, error) { return LoadResult{}, nil }
func (fakeAdmin) Cleanup(context.Context) (CleanupResult, error)      { return CleanupResult{}, nil }
func (fakeAdmin) Replace(context.Context, string) (ReplaceResult, error) {
	return ReplaceResult{}, nil
}

type fakeArchive struct{}

func (fakeArchive) WriteTo(io.Writer) (int64, error) { return 0, nil }
func (fakeArchive) Close() error                     { return nil }
func newTestAPI(t *testing.T, c Config, ts authn.TokenStore) *API {
	t.Helper()
	auth, err := authn.New(authn.Config{Tokens: ts})
	if err != nil {
		t.Fatal(err)
	}
	c.Auth = auth
	a, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Every route, with and without the consensus tier, answers 401 without
// credentials and 403 to a role lacking its permission; the permissions
// are the ones issue 19 asks for (the token routes: security.read to list
// and read, security.write to mint and revoke).
func TestEveryRouteIsGuarded(t *testing.T) {
	tokens := authztest.NewTokens()
	for name, c := range map[string]Config{
		"with the consensus tier": {KV: fakeKV{}, CP: fakeCP{}, CPKeyspaces: []string{"locks", "cache"}, Admin: fakeAdmin{}, Tokens: &fakeTokens{}},
		"ring only":               {KV: fakeKV{}, CPKeyspaces: []string{"locks"}, Admin: fakeAdmin{}},
	} {
		t.Run(name, func(t *testing.T) {
			a := newTestAPI(t, c, tokens)
			authztest.Walk(t, a, a.Routes(), tokens.For)
			for _, r := range a.Routes() {
				method, path, _ := strings.Cut(r.Pattern, " ")
				var want authz.Permission
				switch {
				case strings.HasPrefix(path, TokensPrefix) && method == http.MethodGet:
					want = authz.SecurityRead
				case strings.HasPrefix(path, TokensPrefix):
					want = authz.SecurityWrite
				case strings.HasPrefix(path, "/admin/") && method == http.MethodGet, path == "/v1/ring":
					want = authz.ClusterRead
				case strings.HasPrefix(path, "/admin/"):
					want = authz.ClusterAdmin
				case method == http.MethodGet || path == "/v1/kv:batchGet" || !strings.HasPrefix(path, "/"):
					want = authz.KVRead
				default:
					want = authz.KVWrite
				}
				if r.Permission != want {
					t.Errorf("%s needs %s, want %s", r.Pattern, r.Permission, want)
				}
			}
		})
	}
}

// A route registered without a permission keeps the API from being built.
func TestRouteWithoutPermissionDoesNotStart(t *testing.T) {
	router, err := authz.New(authz.Config{Authenticator: refuseAll{}, AllowedHosts: DefaultAllowedHosts})
	if err != nil {
		t.Fatal(err)
	}
	rt := &routeTable{router: router}
	register(rt, Config{KV: fakeKV{}, CP: fakeCP{}, Admin: fakeAdmin{}})
	rt.handle("POST /admin/v1/oops", "", func(http.ResponseWriter, *http.Request) {})
	if _, err := router.Handler(); err == nil {
		t.Fatal("an API with an unguarded route was built")
	}
	if _, err := New(Config{KV: fakeKV{}}); err == nil {
		t.Fatal("New without Auth or InsecureNoAuth succeeded")
	}
}

// confinedTokens holds an editor token confined to keyspace cache, and an
// unconfined editor's.
func confinedTokens(t *testing.T) (ts authn.TokenStore, cacheOnly, editor string) {
	t.Helper()
	c, e := authn.NewToken(), authn.NewToken()
	st, err := authn.NewStaticTokens(
		authn.StoredToken{ID: c.ID, Hash: c.Hash, Name: "cache-only", Roles: []string{"editor"}, Keyspaces: []string{"cache"}},
		authn.StoredToken{ID: e.ID, Hash: e.Hash, Name: "editor", Roles: []string{"editor"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	return st, c.Plaintext, e.Plaintext
}

func call(h http.Handler, tok, method, path, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Host = "localhost"
	if tok != "" {
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// A credential confined to keyspace cache reads and writes cache, and is
// refused (403, the API's error shape, code forbidden) every other
// keyspace wherever a request names it: the key's, a batch's keys, a
// transaction's compares and ops, a watch's; it may not revoke leases
// (which delete keys in any keyspace) nor read cluster state.
func TestKeyspaceConfinement(t *testing.T) {
	ts, cacheOnly, editor := confinedTokens(t)
	a := newTestAPI(t, Config{KV: fakeKV{}, CP: fakeCP{}, CPKeyspaces: []string{"locks", "cache"}, Admin: fakeAdmin{}, Tokens: &fakeTokens{}}, ts)
	txn := func(ks ...string) string {
		var ops []string
		for _, k := range ks {
			ops = append(ops, `{"op":"put","keyspace":"`+k+`","key":"k","value":"dg=="}`)
		}
		return `{"ops":[` + strings.Join(ops, ",") + `]}`
	}
	const cmpLocks = `{"compare":[{"keyspace":"locks","key":"k","revision":0}],"ops":[{"op":"put","keyspace":"cache","key":"k","value":"dg=="}]}`
	for _, tc := range []struct {
		method, path, body string
		forbidden          bool
	}{
		{"GET", "/v1/cp/cache/topology", "", false},
		{"PUT", "/v1/cp/cache/topology", "v", false},
		{"DELETE", "/v1/cp/cache/topology", "", false},
		{"GET", "/v1/kv/cache:topology", "", false},
		{"PUT", "/v1/kv/cache:topology", "v", false},
		{"POST", "/v1/cp:txn", txn("cache"), false},
		{"GET", "/v1/cp/cache?watch=true", "", false},
		{"POST", "/v1/cp/leases", `{"ttlSeconds":5}`, false},
		{"POST", "/v1/cp/leases/7/keepalive", "", false},

		{"GET", "/v1/cp/locks/leader", "", true},
		{"PUT", "/v1/cp/locks/leader", "me", true},
		{"DELETE", "/v1/cp/locks/leader", "", true},
		{"GET", "/v1/kv/locks:leader", "", true},
		{"PUT", "/v1/kv/locks:leader", "me", true},
		{"PUT", "/v1/kv/sessions:1", "v", true},
		{"DELETE", "/v1/kv/sessions:1", "", true},
		{"POST", "/v1/kv:batchGet", `{"keys":["cache:a","sessions:b"]}`, true},
		{"POST", "/v1/cp:txn", txn("cache", "locks"), true},
		{"POST", "/v1/cp:txn", cmpLocks, true},
		{"GET", "/v1/cp/locks?watch=true", "", true},
		{"DELETE", "/v1/cp/leases/7", "", true},
		{"GET", "/v1/ring", "", true},
		{"GET", "/admin/v1/cp/members", "", true},
		{"GET", "/admin/v1/tokens", "", true},
		{"POST", "/admin/v1/tokens", `{"name":"x","roles":["viewer"],"keyspaces":["cache"]}`, true},
	} {
		w := call(a, cacheOnly, tc.method, tc.path, tc.body)
		var e struct{ Error ErrBody }
		_ = json.Unmarshal(w.Body.Bytes(), &e)
		switch {
		case tc.forbidden && (w.Code != http.StatusForbidden || e.Error.Code != authz.ResultForbidden || e.Error.Message == ""):
			t.Errorf("%s %s confined to cache: %d %s, want 403 forbidden", tc.method, tc.path, w.Code, w.Body)
		case !tc.forbidden && (w.Code == http.StatusForbidden || w.Code == http.StatusUnauthorized || w.Code >= 400 && w.Code != http.StatusNotFound && w.Code != http.StatusServiceUnavailable):
			t.Errorf("%s %s confined to cache: %d %s, want it served", tc.method, tc.path, w.Code, w.Body)
		}
		// An unconfined editor is served all the data routes.
		if tc.forbidden && !strings.HasPrefix(tc.path, "/admin/") && tc.path != "/v1/ring" {
			if w := call(a, editor, tc.method, tc.path, tc.body); w.Code == http.StatusForbidden || w.Code == http.StatusUnauthorized {
				t.Errorf("%s %s as an unconfined editor: %d %s", tc.method, tc.path, w.Code, w.Body)
			}
		}
	}
}

// A follower forwards the caller's Authorization header to the leader,
// which checks the caller's own credential.
func TestForwardCarriesCredential(t *testing.T) {
	ts, cacheOnly, _ := confinedTokens(t)
	var mu sync.Mutex
	var got []string
	leaderAPI := newTestAPI(t, Config{CP: fakeCP{}, CPKeyspaces: []string{"locks", "cache"}}, ts)
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		leaderAPI.ServeHTTP(w, r)
	}))
	defer leader.Close()
	follower := newTestAPI(t, Config{CP: followerCP{leader: strings.TrimPrefix(leader.URL, "http://")}, CPKeyspaces: []string{"locks", "cache"}}, ts)
	w := call(follower, cacheOnly, "PUT", "/v1/cp/cache/topology", "v")
	if w.Code != http.StatusOK || w.Header().Get(HeaderForwarded) != "L" {
		t.Fatalf("forwarded PUT: %d %s", w.Code, w.Body)
	}
	if len(got) != 1 || got[0] != "Bearer "+cacheOnly {
		t.Fatalf("leader saw Authorization %q", got)
	}
	// Refused on the follower: never forwarded.
	if w := call(follower, cacheOnly, "PUT", "/v1/cp/locks/leader", "me"); w.Code != http.StatusForbidden || len(got) != 1 {
		t.Fatalf("confined PUT to locks: %d %s, forwarded %d", w.Code, w.Body, len(got))
	}
}

// InsecureNoAuth serves everything to anyone, with any Host.
func TestInsecureNoAuth(t *testing.T) {
	a, err := New(Config{KV: fakeKV{}, CP: fakeCP{}, CPKeyspaces: []string{"locks"}, Admin: fakeAdmin{}, InsecureNoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/admin/v1/join", "/admin/v1/cp/members"} {
		w := httptest.NewRecorder()
		a.ServeHTTP(w, httptest.NewRequest("POST", p, strings.NewReader(`{"id":"n9","raftAddr":"127.0.0.1:1"}`)))
		if w.Code != http.StatusOK {
			t.Fatalf("POST %s: %d %s", p, w.Code, w.Body)
		}
	}
	if len(a.Routes()) < 15 {
		t.Fatalf("%d routes listed", len(a.Routes()))
	}
}
