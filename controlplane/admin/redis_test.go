package admin

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/controlplane/store"
	"github.com/portico-io/portico/internal/testdeps"
)

const cacheProxy = `{"name":"cache","listen":{"address":"0.0.0.0","port":6380},` +
	`"cluster":{"seeds":[{"address":"127.0.0.1","port":7000},{"address":"127.0.0.1","port":7001},{"address":"127.0.0.1","port":7002}],` +
	`"clusterRefreshRate":"5s","clusterRefreshTimeout":"3s","redirectRefreshInterval":"1s","redirectRefreshThreshold":5},` +
	`"opTimeout":"1s","readPolicy":"preferMaster"}`

// TestRedisProxyCRUD drives /admin/v1/redis-proxies like every kind:
// idempotent create, ETag, list, PUT/PATCH with If-Match, delete, config
// versions and rollback.
func TestRedisProxyCRUD(t *testing.T) {
	e := newEnv(t)
	base := Prefix + "/redis-proxies"
	key := newKeyHeader()
	w := e.do("POST", base, cacheProxy, key)
	body := e.expect(w, http.StatusCreated)
	if w.Header().Get("ETag") != `"1"` || w.Header().Get(HeaderConfigVersion) != "1" || body["name"] != "cache" || body["readPolicy"] != "preferMaster" {
		t.Fatalf("create: %v %s", w.Header(), w.Body)
	}
	w = e.do("POST", base, cacheProxy, key)
	e.expect(w, http.StatusCreated)
	if w.Header().Get(HeaderReplayed) != "true" || e.head() != 1 {
		t.Fatalf("replay: %v head %d", w.Header(), e.head())
	}
	e.expectError(e.do("POST", base, cacheProxy, newKeyHeader()), http.StatusConflict, CodeAlreadyExists, "")

	w = e.do("GET", base+"/cache", "", nil)
	got := e.expect(w, http.StatusOK)
	if w.Header().Get("ETag") != `"1"` {
		t.Fatalf("etag %q", w.Header().Get("ETag"))
	}
	cl := got["cluster"].(map[string]any)
	if len(cl["seeds"].([]any)) != 3 || cl["clusterRefreshRate"] != "5s" || cl["redirectRefreshThreshold"] != 5.0 || got["opTimeout"] != "1s" {
		t.Fatalf("get: %v", got)
	}

	e.create("redis-proxies", `{"name":"sessions","listen":{"port":6381},"cluster":{"seeds":[{"address":"127.0.0.1","port":7000}]},`+
		`"prefixRoutes":[{"prefix":"shared:","redisProxy":"cache"}]}`) // 2
	list := e.expect(e.do("GET", base+"?limit=1", "", nil), http.StatusOK)
	if items := list["items"].([]any); len(items) != 1 || items[0].(map[string]any)["name"] != "cache" || list["nextCursor"] != "cache" {
		t.Fatalf("list: %v", list)
	}
	list = e.expect(e.do("GET", base+"?cursor=cache", "", nil), http.StatusOK)
	if items := list["items"].([]any); len(items) != 1 || items[0].(map[string]any)["name"] != "sessions" || list["nextCursor"] != "" {
		t.Fatalf("list page 2: %v", list)
	}

	replaced := `{"listen":{"port":6390},"cluster":{"seeds":[{"address":"127.0.0.1","port":7003}]},"readPolicy":"replica"}`
	e.expectError(e.do("PUT", base+"/cache", replaced, nil), http.StatusPreconditionRequired, CodePreconditionRequired, "")
	e.expectError(e.do("PUT", base+"/cache", replaced, hdr("If-Match", `"2"`)), http.StatusPreconditionFailed, CodePreconditionFailed, "")
	w = e.do("PUT", base+"/cache", replaced, hdr("If-Match", `"1"`)) // 3
	if b := e.expect(w, http.StatusOK); b["readPolicy"] != "replica" || w.Header().Get("ETag") != `"3"` {
		t.Fatalf("put: %v %s", w.Header(), w.Body)
	}
	w = e.do("PATCH", base+"/cache", `{"opTimeout":"250ms","readPolicy":null}`, hdr("If-Match", `"3"`)) // 4
	if b := e.expect(w, http.StatusOK); b["opTimeout"] != "250ms" || b["readPolicy"] != nil || b["listen"].(map[string]any)["port"] != 6390.0 {
		t.Fatalf("patch: %s", w.Body)
	}

	// The proxy sessions routes a prefix to cache's cluster: cache cannot go.
	e.expectError(e.do("DELETE", base+"/cache", "", hdr("If-Match", `"4"`)), 422, spec.CodeUnknownRef, "redis-proxies/sessions: prefixRoutes[0].redisProxy")
	e.expect(e.do("DELETE", base+"/sessions", "", hdr("If-Match", `"2"`)), http.StatusNoContent) // 5
	e.expect(e.do("DELETE", base+"/cache", "", hdr("If-Match", `"4"`)), http.StatusNoContent)    // 6
	e.expectError(e.do("GET", base+"/cache", "", nil), http.StatusNotFound, CodeNotFound, "")

	v := e.expect(e.do("GET", Prefix+"/config/versions/4", "", nil), http.StatusOK)
	if ps := v["config"].(map[string]any)["redisProxies"].([]any); len(ps) != 2 {
		t.Fatalf("version 4 config: %v", v["config"])
	}
	// Rollback to version 2 brings both proxies back as they were.
	w = e.do("POST", Prefix+"/config/rollback", `{"toVersion":2}`, newKeyHeader()) // 7
	if b := e.expect(w, http.StatusCreated); b["version"] != 7.0 {
		t.Fatalf("rollback: %s", w.Body)
	}
	got = e.expect(e.do("GET", base+"/cache", "", nil), http.StatusOK)
	if got["readPolicy"] != "preferMaster" || got["listen"].(map[string]any)["port"] != 6380.0 {
		t.Fatalf("after rollback: %v", got)
	}
	e.expect(e.do("GET", base+"/sessions", "", nil), http.StatusOK)
	c2, _ := e.store.ConfigAt(context.Background(), 2)
	c7, _ := e.store.ConfigAt(context.Background(), 7)
	if a, b := mustJSON(t, viewConfig(c2)), mustJSON(t, viewConfig(c7)); a != b {
		t.Fatalf("rollback content:\n%s\n%s", a, b)
	}
}

// TestRedisProxyInvalid: bad input gets 422 naming the field and makes no
// version, including conflicts with other resources and the built-in
// listener's port (the store's compile check).
func TestRedisProxyInvalid(t *testing.T) {
	url := testdeps.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := compile.Options{ListenerPort: 10000}
	st, err := store.Open(ctx, store.Config{DatabaseURL: url, Check: func(c *spec.Config) error { return compile.CheckConfig(c, opts) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	e := &env{t: t, h: newHandler(t, Config{Store: st}), store: st, tokens: roleTokens(t, st)}
	e.create("listeners", `{"name":"alt","port":8081}`)
	e.create("clusters", `{"name":"redis_taken","endpoints":[{"address":"127.0.0.1","port":1}]}`)
	e.create("redis-proxies", cacheProxy)
	head := e.head()
	const seeds = `"cluster":{"seeds":[{"address":"127.0.0.1","port":7000}]}`
	cases := []struct {
		name, body  string
		status      int
		code, field string
	}{
		{"bad port", `{"name":"r","listen":{"port":0},` + seeds + `}`, 422, spec.CodeInvalid, "listen.port"},
		{"port out of range", `{"name":"r","listen":{"port":65536},` + seeds + `}`, 422, spec.CodeInvalid, "listen.port"},
		{"no seeds", `{"name":"r","listen":{"port":6391},"cluster":{"seeds":[]}}`, 422, spec.CodeRequired, "cluster.seeds"},
		{"seed port", `{"name":"r","listen":{"port":6391},"cluster":{"seeds":[{"address":"127.0.0.1","port":0}]}}`, 422, spec.CodeInvalid, "cluster.seeds[0].port"},
		{"port of a listener", `{"name":"r","listen":{"port":8081},` + seeds + `}`, 422, spec.CodeConflict, "redis-proxies/r: listen.port"},
		{"port of another proxy", `{"name":"r","listen":{"port":6380},` + seeds + `}`, 422, spec.CodeConflict, "redis-proxies/r: listen.port"},
		{"port of ingress_http", `{"name":"r","listen":{"port":10000},` + seeds + `}`, 422, spec.CodeConflict, "redis-proxies/r: listen.port"},
		{"envoy name taken", `{"name":"taken","listen":{"port":6391},` + seeds + `}`, 422, spec.CodeConflict, "redis-proxies/taken: name"},
		{"malformed duration", `{"name":"r","listen":{"port":6391},` + seeds + `,"opTimeout":"fast"}`, 422, spec.CodeInvalid, "opTimeout"},
		{"negative duration", `{"name":"r","listen":{"port":6391},"cluster":{"seeds":[{"address":"127.0.0.1","port":7000}],"clusterRefreshRate":"-5s"}}`, 422, spec.CodeInvalid, "cluster.clusterRefreshRate"},
		{"zero-ms duration", `{"name":"r","listen":{"port":6391},"cluster":{"seeds":[{"address":"127.0.0.1","port":7000}],"clusterRefreshTimeout":"1ns"}}`, 422, spec.CodeInvalid, "cluster.clusterRefreshTimeout"},
		{"unknown read policy", `{"name":"r","listen":{"port":6391},` + seeds + `,"readPolicy":"nearest"}`, 422, spec.CodeInvalid, "readPolicy"},
		{"unknown route target", `{"name":"r","listen":{"port":6391},` + seeds + `,"prefixRoutes":[{"prefix":"a:","redisProxy":"nope"}]}`, 422, spec.CodeUnknownRef, "redis-proxies/r: prefixRoutes[0].redisProxy"},
		{"unknown field", `{"name":"r","listen":{"port":6391},` + seeds + `,"mode":"cluster"}`, 422, spec.CodeInvalid, "mode"},
		{"platform TLS without a gateway identity", `{"name":"r","listen":{"port":6391},"cluster":{"seeds":[{"address":"127.0.0.1","port":7000}],"platformTLS":true}}`, 422, spec.CodeInvalid, "redis-proxies/r: cluster.platformTLS"},
		{"malformed", `{"name":"r",`, 400, CodeMalformedJSON, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.t = t
			e.expectError(e.do("POST", Prefix+"/redis-proxies", tc.body, newKeyHeader()), tc.status, tc.code, tc.field)
			if h := e.head(); h != head {
				t.Fatalf("head moved to %d", h)
			}
		})
	}
	e.t = t
	// A listener cannot take a proxy's port either.
	e.expectError(e.do("POST", Prefix+"/listeners", `{"name":"l2","port":6380}`, newKeyHeader()), 422, spec.CodeConflict, "redis-proxies/cache: listen.port")
	if h := e.head(); h != head {
		t.Fatalf("head moved to %d", h)
	}
}
