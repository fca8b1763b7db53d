package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/portico-io/portico/kvnode/cp"
)

// openHandler is c's API served without authentication (these tests are
// not about it).
func openHandler(t testing.TB, c Config) http.Handler {
	t.Helper()
	c.InsecureNoAuth = true
	a, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// followerCP is a consensus tier that is never the leader: every key
// request is forwarded to leader.
type followerCP struct {
	CPEngine
	leader string
}

func (f followerCP) notLeader() error {
	return &cp.NotLeaderError{LeaderID: "L", LeaderHTTPAddr: f.leader}
}

func (f followerCP) Get(context.Context, string, string, bool) (cp.Entry, error) {
	return cp.Entry{}, f.notLeader()
}

func (f followerCP) Put(context.Context, string, string, []byte, *uint64, uint64) (cp.Entry, error) {
	return cp.Entry{}, f.notLeader()
}

// A follower forwards /v1/kv/{keyspace}:{key} to the leader in its /v1/cp/
// form (path escaped, query kept), so a leader that does not declare the
// keyspace answers 404 rather than serving the key from its ring.
func TestKVInCPKeyspaceForwardsInCPForm(t *testing.T) {
	var got []string
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.URL.RequestURI()+" If-Match="+r.Header.Get("If-Match"))
		// A leader without the keyspace declared.
		openHandler(t, Config{CP: followerCP{}, CPKeyspaces: []string{"other"}}).ServeHTTP(w, r)
	}))
	defer leader.Close()
	h := openHandler(t, Config{CP: followerCP{leader: strings.TrimPrefix(leader.URL, "http://")}, CPKeyspaces: []string{"locks"}})

	for _, tc := range []struct{ method, path, hdr, want string }{
		{"GET", "/v1/kv/locks:x/y%20z%3F?stale=false", "", "/v1/cp/locks/x/y%20z%3F?stale=false If-Match="},
		{"PUT", "/v1/kv/locks:job-7", `"12"`, `/v1/cp/locks/job-7 If-Match="12"`},
	} {
		got = nil
		r := httptest.NewRequest(tc.method, tc.path, strings.NewReader("v"))
		if tc.hdr != "" {
			r.Header.Set("If-Match", tc.hdr)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s %s forwarded as %q, want %q", tc.method, tc.path, got, tc.want)
		}
		var body struct{ Error ErrBody }
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != http.StatusNotFound || body.Error.Code != "keyspace_not_cp" || !strings.Contains(body.Error.Message, `"locks"`) {
			t.Errorf("%s %s: %d %s, want the leader's 404 keyspace_not_cp", tc.method, tc.path, w.Code, w.Body)
		}
		if w.Header().Get(HeaderForwarded) != "L" {
			t.Errorf("%s %s: %s = %q", tc.method, tc.path, HeaderForwarded, w.Header().Get(HeaderForwarded))
		}
	}
}

// Without the consensus tier a declared keyspace is 501 under /v1/kv/ as
// under /v1/cp/, never the ring.
func TestCPKeyspaceWithoutTheTier(t *testing.T) {
	h := openHandler(t, Config{CPKeyspaces: []string{"locks"}})
	for _, path := range []string{"/v1/kv/locks:a", "/v1/cp/locks/a"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		if w.Code != http.StatusNotImplemented {
			t.Errorf("GET %s: %d %s, want 501", path, w.Code, w.Body)
		}
	}
}

// FuzzParseKVAsCP drives the /v1/kv/ edge of a CP keyspace with arbitrary
// keys, query strings, headers and bodies: it must never panic, must
// split an accepted key into the keyspace and a non-empty key within the
// limits, and must explain every rejection with a 400/413 naming the field.
func FuzzParseKVAsCP(f *testing.F) {
	f.Add("locks:job-7", "stale=true", `"12"`, "", "", []byte("v"), "PUT")
	f.Add("locks", "", "", "", "", []byte{}, "GET")
	f.Add("locks:", "lease=3", "0", "", "", []byte("x"), "PUT")
	f.Add("locks:a:b/c", "consistency=ONE", "", "", "", []byte("x"), "GET")
	f.Add("locks:a", "ttl=5&lease=0", "W/\"1\"", "AAAA", "op-1", []byte("x"), "DELETE")
	f.Add("a b:c", "", "", "", "", []byte("x"), "PUT")
	f.Fuzz(func(t *testing.T, key, query, ifMatch, xctx, idem string, body []byte, method string) {
		switch method {
		case http.MethodGet, http.MethodPut, http.MethodDelete:
		default:
			method = http.MethodPut
		}
		r := httptest.NewRequest(method, "/v1/kv/x", strings.NewReader(string(body)))
		r.URL.RawQuery = query
		r.SetPathValue("key", key)
		r.Header.Set("If-Match", ifMatch)
		r.Header.Set("X-KV-Context", xctx)
		r.Header.Set("Idempotency-Key", idem)
		req, err := ParseKVAsCP(r)
		if err != nil {
			var br *BadRequest
			if !errors.As(err, &br) {
				t.Fatalf("non-validation error %v", err)
			}
			if br.Field == "" || (br.Status != http.StatusBadRequest && br.Status != http.StatusRequestEntityTooLarge) {
				t.Fatalf("bad rejection %+v", br)
			}
			return
		}
		if req.Keyspace+":"+req.Key != key || req.Key == "" || len(key) > MaxKeyBytes {
			t.Fatalf("key %q accepted as %q / %q", key, req.Keyspace, req.Key)
		}
		if _, err := ParseKeyspace(req.Keyspace); err != nil {
			t.Fatalf("keyspace %q accepted: %v", req.Keyspace, err)
		}
		if xctx != "" || idem != "" {
			t.Fatal("a ring option was accepted")
		}
		if method == http.MethodPut && string(req.Value) != string(body) {
			t.Fatal("value mangled")
		}
	})
}
