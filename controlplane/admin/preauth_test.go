package admin

import (
	"net/http"
	"testing"

	"github.com/portico-io/portico/controlplane/spec"
)

// TestListenerPreAuthLimit: a listener's preAuthLimit is stored and
// returned as given; bad values get 422 naming the field and make no
// version, on create and on PATCH.
func TestListenerPreAuthLimit(t *testing.T) {
	e := newEnv(t)
	e.create("listeners", `{"name":"edge","port":8443,"preAuthLimit":{"requestsPerSecond":20,"burst":40}}`)
	got := e.expect(e.do("GET", Prefix+"/listeners/edge", "", nil), http.StatusOK)
	if pa, _ := got["preAuthLimit"].(map[string]any); pa["requestsPerSecond"] != 20.0 || pa["burst"] != 40.0 {
		t.Fatalf("get: %v", got)
	}
	head := e.head()
	for _, tc := range []struct{ name, body, code, field string }{
		{"no rate", `{"name":"l","port":8444,"preAuthLimit":{"burst":40}}`, spec.CodeRequired, "preAuthLimit.requestsPerSecond"},
		{"burst below rate", `{"name":"l","port":8444,"preAuthLimit":{"requestsPerSecond":20,"burst":5}}`, spec.CodeInvalid, "preAuthLimit.burst"},
		{"rate too high", `{"name":"l","port":8444,"preAuthLimit":{"requestsPerSecond":2000000}}`, spec.CodeInvalid, "preAuthLimit.requestsPerSecond"},
		{"disabled with a rate", `{"name":"l","port":8444,"preAuthLimit":{"disabled":true,"requestsPerSecond":5}}`, spec.CodeInvalid, "preAuthLimit.disabled"},
		{"negative", `{"name":"l","port":8444,"preAuthLimit":{"requestsPerSecond":-5}}`, spec.CodeInvalid, "preAuthLimit.requestsPerSecond"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.t = t
			e.expectError(e.do("POST", Prefix+"/listeners", tc.body, newKeyHeader()), http.StatusUnprocessableEntity, tc.code, tc.field)
			if h := e.head(); h != head {
				t.Fatalf("head moved to %d", h)
			}
		})
	}
	e.t = t
	e.expectError(e.do("PATCH", Prefix+"/listeners/edge", `{"preAuthLimit":{"burst":1}}`, hdr("If-Match", `"1"`)),
		http.StatusUnprocessableEntity, spec.CodeInvalid, "preAuthLimit.burst")
	if h := e.head(); h != head {
		t.Fatalf("head moved to %d", h)
	}
	// Turning it off is a change like any other.
	w := e.do("PATCH", Prefix+"/listeners/edge", `{"preAuthLimit":{"requestsPerSecond":null,"burst":null,"disabled":true}}`, hdr("If-Match", `"1"`))
	if b := e.expect(w, http.StatusOK); b["preAuthLimit"].(map[string]any)["disabled"] != true {
		t.Fatalf("patch: %s", w.Body)
	}
}
