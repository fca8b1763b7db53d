package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-io/portico/controlplane/nodes"
	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/controlplane/store"
	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/internal/authz/authztest"
	"github.com/portico-io/portico/internal/testdeps"
)

type env struct {
	t     testing.TB
	h     *Handler
	store *store.Store
	url   string
	reg   *prometheus.Registry
	nodes *nodes.Tracker
	// tokens are API tokens of each role, stored in the real store; do
	// sends the admin's unless the request names its own Authorization.
	tokens map[authz.Role]string
}

// newHandler builds the handler as the control plane does, authenticating
// with the store's API tokens, for requests to httptest's default host.
func newHandler(t testing.TB, cfg Config) *Handler {
	t.Helper()
	auth, err := authn.New(authn.Config{Tokens: cfg.Store})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Auth, cfg.AllowedHosts = auth, []string{"example.com", authztest.Host}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// roleTokens creates one API token per role in st.
func roleTokens(t testing.TB, st *store.Store) map[authz.Role]string {
	t.Helper()
	out := map[authz.Role]string{}
	for _, role := range authz.Roles() {
		issued := authn.NewToken()
		if _, err := st.CreateToken(context.Background(), store.Token{ID: issued.ID, Name: "test-" + string(role),
			Roles: []string{string(role)}, CreatedBy: "test"}, issued.Hash); err != nil {
			t.Fatal(err)
		}
		out[role] = issued.Plaintext
	}
	return out
}

func newEnv(t testing.TB) *env {
	t.Helper()
	url := testdeps.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Config{DatabaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	reg := prometheus.NewRegistry()
	tr := nodes.NewTracker()
	h := newHandler(t, Config{Store: st, Nodes: tr, Registry: reg})
	return &env{t: t, h: h, store: st, url: url, reg: reg, nodes: tr, tokens: roleTokens(t, st)}
}

var keySeq atomic.Int64

// hdr builds request headers; "key" is shorthand for a fresh Idempotency-Key.
func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func newKeyHeader() http.Header {
	return hdr(HeaderIdempotencyKey, fmt.Sprintf("key-%d-%d", time.Now().UnixNano(), keySeq.Add(1)))
}

func (e *env) do(method, path, body string, h http.Header) *httptest.ResponseRecorder {
	e.t.Helper()
	var r *http.Request
	if body == "" {
		r = httptest.NewRequest(method, path, nil)
	} else {
		r = httptest.NewRequest(method, path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
	}
	if e.tokens != nil {
		r.Header.Set("Authorization", "Bearer "+e.tokens[authz.Admin])
	}
	for k, v := range h {
		r.Header[k] = v
	}
	if r.Header.Get("Authorization") == "none" {
		r.Header.Del("Authorization")
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	if ct := w.Header().Get("Content-Type"); w.Body.Len() > 0 && ct != "application/json" {
		e.t.Fatalf("%s %s: content type %q", method, path, ct)
	}
	return w
}

func (e *env) expect(w *httptest.ResponseRecorder, status int) map[string]any {
	e.t.Helper()
	if w.Code != status {
		e.t.Fatalf("status %d, want %d: %s", w.Code, status, w.Body)
	}
	out := map[string]any{}
	if w.Body.Len() > 0 {
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			e.t.Fatalf("body %q: %v", w.Body, err)
		}
	}
	return out
}

// expectError checks the error envelope.
func (e *env) expectError(w *httptest.ResponseRecorder, status int, code, field string) {
	e.t.Helper()
	body := e.expect(w, status)
	errObj, ok := body["error"].(map[string]any)
	if !ok {
		e.t.Fatalf("no error envelope: %s", w.Body)
	}
	if errObj["code"] != code || (field != "" && errObj["field"] != field) {
		e.t.Fatalf("error %v, want code %q field %q", errObj, code, field)
	}
	if msg, _ := errObj["message"].(string); msg == "" {
		e.t.Fatalf("error without message: %v", errObj)
	}
}

func (e *env) head() int64 {
	e.t.Helper()
	v, err := e.store.Head(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

func (e *env) create(kind, body string) *httptest.ResponseRecorder {
	e.t.Helper()
	w := e.do("POST", Prefix+"/"+kind, body, newKeyHeader())
	e.expect(w, http.StatusCreated)
	return w
}

const (
	echoCluster = `{"name":"echo","endpoints":[{"address":"127.0.0.1","port":18900}]}`
	echoRoute   = `{"name":"echo","match":{"pathPrefix":"/echo"},"cluster":"echo"}`
)

func TestCreateIsIdempotent(t *testing.T) {
	e := newEnv(t)
	key := hdr(HeaderIdempotencyKey, "create-1", HeaderAuthor, "alice")
	w := e.do("POST", Prefix+"/clusters", echoCluster, key)
	first := e.expect(w, http.StatusCreated)
	if w.Header().Get("ETag") != `"1"` || w.Header().Get(HeaderConfigVersion) != "1" || first["name"] != "echo" {
		t.Fatalf("create: %v %s", w.Header(), w.Body)
	}
	firstBody := w.Body.String()

	// Same key, same body (modulo whitespace): the same answer, no new version.
	w = e.do("POST", Prefix+"/clusters", " "+strings.ReplaceAll(echoCluster, ",", ", ")+"\n", key)
	e.expect(w, http.StatusCreated)
	if w.Body.String() != firstBody || w.Header().Get(HeaderReplayed) != "true" || w.Header().Get(HeaderConfigVersion) != "1" || w.Header().Get("ETag") != `"1"` {
		t.Fatalf("replay: %v %s", w.Header(), w.Body)
	}
	// Same key, different body.
	other := strings.Replace(echoCluster, "18900", "18901", 1)
	e.expectError(e.do("POST", Prefix+"/clusters", other, key), http.StatusUnprocessableEntity, CodeIdempotencyKeyReused, "")
	// No key at all.
	e.expectError(e.do("POST", Prefix+"/clusters", other, nil), http.StatusPreconditionRequired, CodeIdempotencyKeyRequired, "")
	// A new key for an existing name.
	e.expectError(e.do("POST", Prefix+"/clusters", other, newKeyHeader()), http.StatusConflict, CodeAlreadyExists, "name")
	if h := e.head(); h != 1 {
		t.Fatalf("head = %d", h)
	}
}

func TestIfMatch(t *testing.T) {
	e := newEnv(t)
	e.create("clusters", echoCluster)
	path := Prefix + "/clusters/echo"
	w := e.do("GET", path, "", nil)
	e.expect(w, http.StatusOK)
	tag := w.Header().Get("ETag")
	if tag != `"1"` {
		t.Fatalf("etag %q", tag)
	}
	updated := `{"endpoints":[{"address":"127.0.0.1","port":18901}]}`
	e.expectError(e.do("PUT", path, updated, nil), http.StatusPreconditionRequired, CodePreconditionRequired, "")
	e.expectError(e.do("PUT", path, updated, hdr("If-Match", `"7"`)), http.StatusPreconditionFailed, CodePreconditionFailed, "")
	e.expectError(e.do("PUT", path, `{"name":"other","endpoints":[{"address":"127.0.0.1","port":1}]}`, hdr("If-Match", tag)),
		http.StatusUnprocessableEntity, spec.CodeInvalid, "name")
	w = e.do("PUT", path, updated, hdr("If-Match", tag))
	body := e.expect(w, http.StatusOK)
	if w.Header().Get("ETag") != `"2"` || w.Header().Get(HeaderConfigVersion) != "2" || body["name"] != "echo" {
		t.Fatalf("put: %v %s", w.Header(), w.Body)
	}
	// Replacing with the same content makes no version.
	w = e.do("PUT", path, updated, hdr("If-Match", `"2"`))
	e.expect(w, http.StatusOK)
	if w.Header().Get(HeaderConfigVersion) != "2" || e.head() != 2 {
		t.Fatalf("no-op put made a version: %v", w.Header())
	}
	e.expectError(e.do("DELETE", path, "", nil), http.StatusPreconditionRequired, CodePreconditionRequired, "")
	e.expectError(e.do("DELETE", path, "", hdr("If-Match", `"1"`)), http.StatusPreconditionFailed, CodePreconditionFailed, "")
	w = e.do("DELETE", path, "", hdr("If-Match", `"2"`))
	if w.Code != http.StatusNoContent || w.Header().Get(HeaderConfigVersion) != "3" {
		t.Fatalf("delete: %d %v", w.Code, w.Header())
	}
	e.expectError(e.do("GET", path, "", nil), http.StatusNotFound, CodeNotFound, "")
	e.expectError(e.do("PUT", path, updated, hdr("If-Match", `"2"`)), http.StatusNotFound, CodeNotFound, "")
	// Deleted resources can be created again.
	e.create("clusters", echoCluster)
}

func TestInvalidInputChangesNothing(t *testing.T) {
	e := newEnv(t)
	e.create("clusters", echoCluster)
	e.create("routes", echoRoute)
	head := e.head()
	cases := []struct {
		name, kind, body string
		status           int
		code, field      string
	}{
		{"unknown cluster", "routes", `{"name":"r","match":{"pathPrefix":"/r"},"cluster":"nope"}`, 422, spec.CodeUnknownRef, "routes/r: cluster"},
		{"bad regex", "routes", `{"name":"r","match":{"pathRegex":"(["},"cluster":"echo"}`, 422, spec.CodeInvalid, "match.pathRegex"},
		{"zero limit", "ratelimit-rules", `{"name":"z","domain":"portico","descriptors":[{"key":"consumer"}],"limit":0,"window":"1s"}`, 422, spec.CodeInvalid, "limit"},
		{"sliding window burst", "ratelimit-rules", `{"name":"s","domain":"portico","descriptors":[{"key":"consumer"}],"limit":5,"window":"1m","algorithm":"SLIDING_WINDOW","burst":2}`, 422, spec.CodeInvalid, "burst"},
		{"retries disabled with a policy", "routes", `{"name":"rd","match":{"pathPrefix":"/rd"},"cluster":"echo","retries":{"disabled":true,"numRetries":2}}`, 422, spec.CodeInvalid, "retries.disabled"},
		{"outlier detection disabled with settings", "clusters", `{"name":"od","endpoints":[{"address":"127.0.0.1","port":1}],"outlierDetection":{"disabled":true,"consecutive5xx":3}}`, 422, spec.CodeInvalid, "outlierDetection.disabled"},
		{"failure percentage over 100", "clusters", `{"name":"fp","endpoints":[{"address":"127.0.0.1","port":1}],"outlierDetection":{"failurePercentage":{"threshold":101}}}`, 422, spec.CodeInvalid, "outlierDetection.failurePercentage.threshold"},
		{"reserved cluster name", "clusters", `{"name":"ratelimit","endpoints":[{"address":"127.0.0.1","port":1}]}`, 422, spec.CodeInvalid, "name"},
		{"unknown algorithm", "ratelimit-rules", `{"name":"s","domain":"portico","descriptors":[{"key":"consumer"}],"limit":5,"window":"1m","algorithm":"LEAKY"}`, 422, spec.CodeInvalid, "algorithm"},
		{"conflicting match", "routes", `{"name":"zz","match":{"pathPrefix":"/echo"},"cluster":"echo"}`, 422, spec.CodeConflict, "routes/zz: match"},
		{"unknown field", "clusters", `{"name":"c","endpoints":[{"address":"127.0.0.1","port":1}],"colour":"red"}`, 422, spec.CodeInvalid, "colour"},
		{"wrong type", "clusters", `{"name":"c","endpoints":[{"address":"127.0.0.1","port":"80"}]}`, 422, spec.CodeInvalid, "endpoints.port"},
		{"not an object", "clusters", `[1,2]`, 422, spec.CodeInvalid, ""},
		{"malformed", "clusters", `{"name":`, 400, CodeMalformedJSON, ""},
		{"empty", "clusters", ``, 400, CodeMalformedJSON, ""},
		{"too large", "clusters", `{"name":"c","pad":"` + strings.Repeat("x", DefaultMaxBodyBytes) + `"}`, 413, CodeBodyTooLarge, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.t = t
			e.expectError(e.do("POST", Prefix+"/"+tc.kind, tc.body, newKeyHeader()), tc.status, tc.code, tc.field)
			if h := e.head(); h != head {
				t.Fatalf("head moved to %d", h)
			}
		})
	}
	e.t = t
	// Deleting a cluster a route uses is refused the same way.
	e.expectError(e.do("DELETE", Prefix+"/clusters/echo", "", hdr("If-Match", "*")), 422, spec.CodeUnknownRef, "routes/echo: cluster")
	e.expectError(e.do("POST", Prefix+"/clusters", echoCluster, hdr(HeaderIdempotencyKey, "k", "Content-Type", "text/plain")), 415, CodeUnsupportedMediaType, "")
	if h := e.head(); h != head {
		t.Fatalf("head moved to %d", h)
	}
}

func TestListPagination(t *testing.T) {
	e := newEnv(t)
	for i := range 5 {
		e.create("consumers", fmt.Sprintf(`{"name":"c%d","tenant":"t"}`, i))
	}
	var names []string
	cursor := ""
	for range 10 {
		body := e.expect(e.do("GET", Prefix+"/consumers?limit=2&cursor="+cursor, "", nil), http.StatusOK)
		for _, it := range body["items"].([]any) {
			names = append(names, it.(map[string]any)["name"].(string))
		}
		cursor = body["nextCursor"].(string)
		if cursor == "" {
			break
		}
	}
	if strings.Join(names, ",") != "c0,c1,c2,c3,c4" {
		t.Fatalf("listed %v", names)
	}
	body := e.expect(e.do("GET", Prefix+"/clusters", "", nil), http.StatusOK)
	if items := body["items"].([]any); len(items) != 0 {
		t.Fatalf("empty list: %v", body)
	}
	e.expectError(e.do("GET", Prefix+"/consumers?limit=0", "", nil), 400, CodeInvalidParameter, "limit")
	e.expectError(e.do("GET", Prefix+"/consumers?limit=x", "", nil), 400, CodeInvalidParameter, "limit")
	e.expect(e.do("GET", Prefix+"/consumers?limit=5000", "", nil), http.StatusOK)
}

func TestPatch(t *testing.T) {
	e := newEnv(t)
	e.create("consumers", `{"name":"acme","tenant":"acme","tier":"free","metadata":{"a":"1","b":"2"}}`)
	path := Prefix + "/consumers/acme"
	e.expectError(e.do("PATCH", path, `{"tier":"pro"}`, nil), 428, CodePreconditionRequired, "")
	e.expectError(e.do("PATCH", path, `{"tier":"pro"}`, hdr("If-Match", `"9"`)), 412, CodePreconditionFailed, "")
	w := e.do("PATCH", path, `{"tier":"pro","metadata":{"a":null,"c":"3"}}`, hdr("If-Match", `"1"`))
	body := e.expect(w, http.StatusOK)
	md := body["metadata"].(map[string]any)
	if body["tier"] != "pro" || body["tenant"] != "acme" || md["a"] != nil || md["b"] != "2" || md["c"] != "3" || w.Header().Get("ETag") != `"2"` {
		t.Fatalf("patched: %s %v", w.Body, w.Header())
	}
	e.expectError(e.do("PATCH", path, `{"tier":null,"tenant":null}`, hdr("If-Match", `"2"`)), 422, spec.CodeRequired, "tenant")
	e.expectError(e.do("PATCH", path, `{"name":"other"}`, hdr("If-Match", `"2"`)), 422, spec.CodeInvalid, "name")
	e.expectError(e.do("PATCH", path, `{"tier":`, hdr("If-Match", `"2"`)), 400, CodeMalformedJSON, "")
	e.expectError(e.do("PATCH", Prefix+"/consumers/nope", `{"tier":"x"}`, hdr("If-Match", `"2"`)), 404, CodeNotFound, "")
	if h := e.head(); h != 2 {
		t.Fatalf("head %d", h)
	}
	// Revocations are addressed by jti.
	e.create("revocations", `{"jti":"tok-1","expiresAt":"2030-01-01T00:00:00Z"}`)
	w = e.do("PATCH", Prefix+"/revocations/tok-1", `{"expiresAt":"2031-01-01T00:00:00Z"}`, hdr("If-Match", "*"))
	if body := e.expect(w, 200); body["jti"] != "tok-1" || body["expiresAt"] != "2031-01-01T00:00:00Z" {
		t.Fatalf("revocation patch: %s", w.Body)
	}
	e.expect(e.do("PUT", Prefix+"/revocations/tok-1", `{"expiresAt":"2032-01-01T00:00:00Z"}`, hdr("If-Match", "*")), 200)
}

func TestAPIKeys(t *testing.T) {
	e := newEnv(t)
	e.create("consumers", `{"name":"acme","tenant":"acme"}`)
	keys := Prefix + "/consumers/acme/keys"
	e.expectError(e.do("POST", keys, "", nil), 428, CodeIdempotencyKeyRequired, "")
	e.expectError(e.do("POST", Prefix+"/consumers/nope/keys", "", newKeyHeader()), 404, CodeNotFound, "")
	e.expectError(e.do("POST", keys, `{"scopes":["a b"]}`, newKeyHeader()), 422, spec.CodeInvalid, "scopes[0]")
	e.expectError(e.do("POST", keys, `{"expiresAt":"2000-01-01T00:00:00Z"}`, newKeyHeader()), 422, spec.CodeInvalid, "expiresAt")
	e.expectError(e.do("POST", keys, `{"scope":["x"]}`, newKeyHeader()), 422, spec.CodeInvalid, "scope")

	idem := hdr(HeaderIdempotencyKey, "key-create-1")
	w := e.do("POST", keys, `{"scopes":["echo:read"]}`, idem)
	created := e.expect(w, http.StatusCreated)
	secret, _ := created["key"].(string)
	id, _ := created["id"].(string)
	if !strings.HasPrefix(secret, "pk_") || len(secret) != 46 || id == "" || created["prefix"] != secret[:8] || w.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("created: %s", w.Body)
	}
	sum := sha256.Sum256([]byte(secret))
	hash := hex.EncodeToString(sum[:])
	stored, _, err := e.store.Get(context.Background(), spec.KindAPIKey, id)
	if err != nil || stored.(*spec.APIKey).SHA256 != hash || stored.(*spec.APIKey).Consumer != "acme" {
		t.Fatalf("stored key: %+v %v", stored, err)
	}
	// The replay gives the id, never the secret.
	w = e.do("POST", keys, `{"scopes":["echo:read"]}`, idem)
	replayed := e.expect(w, http.StatusCreated)
	if replayed["id"] != id || replayed["key"] != nil || replayed["keyShownOnce"] != true || w.Header().Get(HeaderReplayed) != "true" {
		t.Fatalf("replay: %s", w.Body)
	}
	// Listing and reading never show the secret or its hash.
	w = e.do("GET", keys, "", nil)
	list := e.expect(w, http.StatusOK)
	if items := list["items"].([]any); len(items) != 1 || items[0].(map[string]any)["id"] != id {
		t.Fatalf("list: %s", w.Body)
	}
	w2 := e.do("GET", keys+"/"+id, "", nil)
	e.expect(w2, http.StatusOK)
	for _, b := range []string{w.Body.String(), w2.Body.String(), e.do("GET", Prefix+"/audit", "", nil).Body.String(),
		e.do("GET", Prefix+"/config/versions/2", "", nil).Body.String()} {
		if strings.Contains(b, secret) || strings.Contains(b, hash) {
			t.Fatalf("secret or hash shown: %s", b)
		}
	}
	// Nothing in the database holds the secret.
	conn, err := pgx.Connect(context.Background(), e.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var hits int
	err = conn.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM controlplane.idempotency WHERE position($1::bytea IN response) > 0) +
		(SELECT count(*) FROM controlplane.resources WHERE body::text LIKE '%' || $2 || '%') +
		(SELECT count(*) FROM controlplane.audit WHERE diff::text LIKE '%' || $2 || '%')`, []byte(secret), secret).Scan(&hits)
	if err != nil || hits != 0 {
		t.Fatalf("secret stored %d times (%v)", hits, err)
	}
	// Another consumer cannot see or revoke it.
	e.create("consumers", `{"name":"other","tenant":"other"}`)
	e.expectError(e.do("GET", Prefix+"/consumers/other/keys/"+id, "", nil), 404, CodeNotFound, "")
	e.expectError(e.do("DELETE", Prefix+"/consumers/other/keys/"+id, "", hdr("If-Match", "*")), 404, CodeNotFound, "")
	// Revocation needs the ETag.
	tag := w2.Header().Get("ETag")
	e.expectError(e.do("DELETE", keys+"/"+id, "", nil), 428, CodePreconditionRequired, "")
	if w := e.do("DELETE", keys+"/"+id, "", hdr("If-Match", tag)); w.Code != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", w.Code, w.Body)
	}
	e.expectError(e.do("GET", keys+"/"+id, "", nil), 404, CodeNotFound, "")
	// Keys are not a top-level collection.
	e.expectError(e.do("GET", Prefix+"/apikeys", "", nil), 404, CodeNotFound, "")
}

func TestRollbackVersionsAndAudit(t *testing.T) {
	e := newEnv(t)
	e.create("clusters", echoCluster) // 1
	e.create("routes", echoRoute)     // 2
	w := e.do("PUT", Prefix+"/clusters/echo", `{"endpoints":[{"address":"10.0.0.1","port":80}]}`,
		hdr("If-Match", `"1"`, HeaderAuthor, "bob", HeaderReason, "move echo")) // 3
	e.expect(w, 200)

	e.expectError(e.do("POST", Prefix+"/config/rollback", `{"toVersion":2}`, nil), 428, CodeIdempotencyKeyRequired, "")
	e.expectError(e.do("POST", Prefix+"/config/rollback", `{"toVersion":99}`, newKeyHeader()), 422, spec.CodeUnknownRef, "toVersion")
	e.expectError(e.do("POST", Prefix+"/config/rollback", `{}`, newKeyHeader()), 422, spec.CodeRequired, "toVersion")
	key := hdr(HeaderIdempotencyKey, "rb-1", HeaderAuthor, "oncall")
	w = e.do("POST", Prefix+"/config/rollback", `{"toVersion":2}`, key)
	if body := e.expect(w, http.StatusCreated); body["version"] != 4.0 || w.Header().Get(HeaderConfigVersion) != "4" {
		t.Fatalf("rollback: %s", w.Body)
	}
	if body := e.expect(e.do("POST", Prefix+"/config/rollback", `{"toVersion":2}`, key), 201); body["version"] != 4.0 || e.head() != 4 {
		t.Fatalf("rollback replay: %v", body)
	}
	got := e.expect(e.do("GET", Prefix+"/clusters/echo", "", nil), 200)
	if ep := got["endpoints"].([]any)[0].(map[string]any); ep["port"] != 18900.0 {
		t.Fatalf("after rollback: %v", got)
	}
	c2, _ := e.store.ConfigAt(context.Background(), 2)
	c4, _ := e.store.ConfigAt(context.Background(), 4)
	if a, b := mustJSON(t, viewConfig(c2)), mustJSON(t, viewConfig(c4)); a != b {
		t.Fatalf("rollback content:\n%s\n%s", a, b)
	}

	vs := e.expect(e.do("GET", Prefix+"/config/versions?limit=3", "", nil), 200)
	items := vs["items"].([]any)
	if len(items) != 3 || vs["nextCursor"] != "2" {
		t.Fatalf("versions: %v", vs)
	}
	// The author is the authenticated token, whatever X-Portico-Author said.
	id, _ := authn.ParseTokenID(e.tokens[authz.Admin])
	admin := "token:" + id + " (test-admin)"
	v4, v3 := items[0].(map[string]any), items[1].(map[string]any)
	if v4["version"] != 4.0 || v4["rollbackOf"] != 2.0 || v4["author"] != admin || v3["reason"] != "move echo" || v3["author"] != admin {
		t.Fatalf("version items: %v", items)
	}
	if _, ok := v4["createdAt"].(string); !ok {
		t.Fatalf("createdAt: %v", v4)
	}
	rest := e.expect(e.do("GET", Prefix+"/config/versions?cursor=2", "", nil), 200)
	if n := len(rest["items"].([]any)); n != 1 || rest["nextCursor"] != "" {
		t.Fatalf("versions page 2: %v", rest)
	}
	one := e.expect(e.do("GET", Prefix+"/config/versions/3", "", nil), 200)
	changes := one["changes"].([]any)
	cfg := one["config"].(map[string]any)
	if len(changes) != 1 || changes[0].(map[string]any)["action"] != "update" || len(cfg["clusters"].([]any)) != 1 || len(cfg["routes"].([]any)) != 1 {
		t.Fatalf("version 3: %v", one)
	}
	e.expectError(e.do("GET", Prefix+"/config/versions/77", "", nil), 404, CodeNotFound, "")
	e.expectError(e.do("GET", Prefix+"/config/versions/x", "", nil), 404, CodeNotFound, "")

	audit := e.expect(e.do("GET", Prefix+"/audit?limit=2", "", nil), 200)
	rows := audit["items"].([]any)
	if len(rows) != 1 && len(rows) != 2 {
		t.Fatalf("audit: %v", audit)
	}
	top := rows[0].(map[string]any)
	diff := top["diff"].(map[string]any)
	if top["action"] != "rollback" || top["author"] != admin || top["note"] != "oncall" || top["kind"] != "clusters" || diff["before"] == nil || diff["after"] == nil {
		t.Fatalf("audit top: %v", top)
	}
	all := e.expect(e.do("GET", Prefix+"/audit", "", nil), 200)
	if n := len(all["items"].([]any)); n != 4 {
		t.Fatalf("audit rows: %d", n)
	}
	e.expectError(e.do("GET", Prefix+"/audit?cursor=-1", "", nil), 400, CodeInvalidParameter, "cursor")
}

func mustJSON(t testing.TB, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestNodesUnmatchedAndMetrics(t *testing.T) {
	e := newEnv(t)
	body := e.expect(e.do("GET", Prefix+"/nodes", "", nil), 200)
	if items := body["items"].([]any); len(items) != 0 {
		t.Fatalf("nodes: %v", body)
	}
	e.nodes.Connect("gw-1", "portico-gateway", "canary", "spiffe://portico.local/gateway/gw-1", false)
	e.nodes.Nack("gw-1", "type.googleapis.com/envoy.config.route.v3.RouteConfiguration", "7", "bad regex")
	body = e.expect(e.do("GET", Prefix+"/nodes", "", nil), 200)
	n := body["items"].([]any)[0].(map[string]any)
	if n["id"] != "gw-1" || n["group"] != "canary" || n["identity"] != "spiffe://portico.local/gateway/gw-1" || n["types"].(map[string]any)["type.googleapis.com/envoy.config.route.v3.RouteConfiguration"].(map[string]any)["nack"].(map[string]any)["error"] != "bad regex" {
		t.Fatalf("node: %v", n)
	}

	e.expectError(e.do("GET", Prefix+"/nope", "", nil), 404, CodeNotFound, "")
	w := e.do("DELETE", Prefix+"/clusters", "", nil)
	e.expectError(w, http.StatusMethodNotAllowed, "method_not_allowed", "")
	if allow := w.Header().Values("Allow"); strings.Join(allow, ",") != "GET,POST" {
		t.Fatalf("Allow: %v", allow)
	}

	e.create("clusters", echoCluster)
	if got := e.metric("portico_controlplane_admin_requests_total", "POST", "POST /admin/v1/clusters", "201"); got != 1 {
		t.Fatalf("request counter = %v", got)
	}
	if got := e.metric("portico_controlplane_admin_requests_total", "GET", "unmatched", "404"); got != 1 {
		t.Fatalf("unmatched counter = %v", got)
	}
	if got := e.metric("portico_controlplane_admin_request_duration_seconds", "POST", "POST /admin/v1/clusters"); got != 1 {
		t.Fatalf("latency samples = %v", got)
	}
	// Through a real server, as cmd mounts it.
	srv := httptest.NewServer(e.h)
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+Prefix+"/clusters/echo", nil)
	req.Host = "example.com"
	req.Header.Set("Authorization", "Bearer "+e.tokens[authz.Viewer])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("ETag") != `"1"` {
		t.Fatalf("served: %d %v", resp.StatusCode, resp.Header)
	}
	auth, _ := authn.New(authn.Config{Tokens: e.store})
	if _, err := New(Config{Store: e.store, Registry: e.reg, Auth: auth}); err == nil {
		t.Fatal("registering twice in one registry should fail")
	}
	if _, err := New(Config{}); err == nil {
		t.Fatal("a missing store should fail")
	}
	if _, err := New(Config{Store: e.store}); err == nil {
		t.Fatal("a handler without authentication should fail")
	}
}

// FuzzCreate posts arbitrary bodies as routes: the API must never answer
// 5xx, and the config version moves (by one) exactly when it answers 201.
func FuzzCreate(f *testing.F) {
	for _, s := range []string{
		echoRoute,
		`{"name":"r2","match":{"path":"/x","methods":["GET"]},"weightedClusters":[{"cluster":"echo","weight":1}]}`,
		`{"name":"r3","match":{"pathRegex":"^/v[0-9]+/"},"cluster":"echo","auth":{"mode":"apikey"}}`,
		`{"name":"r","match":{"pathRegex":"(["},"cluster":"echo"}`,
		`{"name":"r","match":{"pathPrefix":"/r"},"cluster":"missing"}`,
		`{"name":"R","match":{},"cluster":""}`,
		`{"name":"r","timeout":"-1s","match":{"pathPrefix":"/"},"cluster":"echo"}`,
		`{"name":"r","retries":{"numRetries":4294967296}}`,
		`{"name":"r","match":{"pathPrefix":"/"},"cluster":"echo","rateLimits":[{"descriptors":[]}]}`,
		`null`, `[]`, `"x"`, `{`, ``, `{"name":"\u0000"}`, `{"name":1e999}`,
	} {
		f.Add(s)
	}
	e := newEnv(f)
	w := e.do("POST", Prefix+"/clusters", echoCluster, newKeyHeader())
	if w.Code != http.StatusCreated {
		f.Fatalf("seed cluster: %d %s", w.Code, w.Body)
	}
	f.Fuzz(func(t *testing.T, body string) {
		e.t = t
		before := e.head()
		w := e.do("POST", Prefix+"/routes", body, newKeyHeader())
		after := e.head()
		if w.Code >= 500 {
			t.Fatalf("5xx for %q: %d %s", body, w.Code, w.Body)
		}
		want := before
		if w.Code == http.StatusCreated {
			want++
			if w.Header().Get(HeaderConfigVersion) != strconv.FormatInt(want, 10) {
				t.Fatalf("version header %q, head %d", w.Header().Get(HeaderConfigVersion), after)
			}
		} else if !strings.Contains(w.Body.String(), `"error"`) {
			t.Fatalf("error without envelope: %d %s", w.Code, w.Body)
		}
		if after != want {
			t.Fatalf("status %d moved the head %d -> %d", w.Code, before, after)
		}
	})
}

// metric returns a counter's value or a histogram's sample count for the
// series whose label values are labels (in label-name order).
func (e *env) metric(name string, labels ...string) float64 {
	e.t.Helper()
	fams, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			byName := map[string]string{}
			for _, l := range m.GetLabel() {
				byName[l.GetName()] = l.GetValue()
			}
			got := []string{byName["method"], byName["route"]}
			if len(labels) == 3 {
				got = append(got, byName["code"])
			}
			for i := range labels {
				if got[i] != labels[i] {
					continue series
				}
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// curl -d sends application/x-www-form-urlencoded; the README's commands use
// it, so it is read as JSON (and still parsed strictly).
func TestCurlDefaultContentType(t *testing.T) {
	e := newEnv(t)
	ct := hdr(HeaderIdempotencyKey, "curl", "Content-Type", "application/x-www-form-urlencoded")
	e.expect(e.do("POST", Prefix+"/clusters", echoCluster, ct), 201)
	bad := hdr(HeaderIdempotencyKey, "curl-bad", "Content-Type", "application/x-www-form-urlencoded")
	e.expectError(e.do("POST", Prefix+"/clusters", "name=echo", bad), 400, CodeMalformedJSON, "")
}
