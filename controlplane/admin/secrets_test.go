package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-io/portico/controlplane/pkitest"
	"github.com/portico-io/portico/controlplane/seal"
	"github.com/portico-io/portico/controlplane/spec"
)

// newSealedEnv is newEnv with a Sealer.
func newSealedEnv(t *testing.T) (*env, *seal.Sealer) {
	t.Helper()
	e := newEnv(t)
	k, err := seal.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	key, _ := seal.ParseKey(k)
	s, err := seal.New(key)
	if err != nil {
		t.Fatal(err)
	}
	e.h = newHandler(t, Config{Store: e.store, Nodes: e.nodes, Registry: prometheus.NewRegistry(), Sealer: s})
	return e, s
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSecretKeysAreSealedAndNeverShown(t *testing.T) {
	e, sealer := newSealedEnv(t)
	ca := pkitest.NewCA(t, "clients")
	srv := ca.Leaf(t, "gw.example.com")
	other := ca.Leaf(t, "other.example.com")
	const pemMarker = "PRIVATE KEY"

	body := jsonOf(t, map[string]any{"name": "gw", "type": "tls", "certificate": srv.CertPEM, "privateKey": srv.KeyPEM})
	idem := newKeyHeader()
	w := e.do("POST", Prefix+"/secrets", body, idem)
	created := e.expect(w, http.StatusCreated)
	createBody := w.Body.String()
	if created["hasPrivateKey"] != true || created["certificate"] != srv.CertPEM || created["notAfter"] == nil {
		t.Fatalf("create: %s", w.Body)
	}
	// The store holds the sealed key, which opens to the original.
	stored, _, err := e.store.Get(context.Background(), spec.KindSecret, "gw")
	if err != nil {
		t.Fatal(err)
	}
	sec := stored.(*spec.Secret)
	if sec.PrivateKey != "" || !seal.IsSealed(sec.SealedPrivateKey) {
		t.Fatalf("stored secret: %+v", sec)
	}
	if key, err := sealer.Open(sec.SealedPrivateKey); err != nil || string(key) != srv.KeyPEM {
		t.Fatalf("sealed key does not open to the original: %v", err)
	}
	replay := e.do("POST", Prefix+"/secrets", body, idem)
	e.expect(replay, http.StatusCreated)
	if replay.Header().Get(HeaderReplayed) != "true" {
		t.Fatalf("not replayed: %v", replay.Header())
	}

	e.create("secrets", jsonOf(t, map[string]any{"name": "clients", "type": "ca", "ca": ca.CertPEM}))
	e.create("listeners", `{"name":"https","port":10443,"tls":{"certificates":["gw"],"clientCa":"clients","requireClientCert":true}}`)

	// A listener naming a ca secret as its certificate, a mismatched pair,
	// a client-sent sealed key.
	e.expectError(e.do("POST", Prefix+"/listeners", `{"name":"bad","port":10444,"tls":{"certificates":["clients"]}}`, newKeyHeader()),
		422, spec.CodeInvalid, "listeners/bad: tls.certificates[0]")
	e.expectError(e.do("POST", Prefix+"/secrets", jsonOf(t, map[string]any{"name": "mismatch", "type": "tls", "certificate": srv.CertPEM, "privateKey": other.KeyPEM}), newKeyHeader()),
		422, spec.CodeInvalid, "privateKey")
	e.expectError(e.do("POST", Prefix+"/secrets", jsonOf(t, map[string]any{"name": "forged", "type": "tls", "certificate": srv.CertPEM, "sealedPrivateKey": sec.SealedPrivateKey}), newKeyHeader()),
		422, spec.CodeInvalid, "sealedPrivateKey")
	// A secret in use cannot be deleted.
	e.expectError(e.do("DELETE", Prefix+"/secrets/gw", "", hdr("If-Match", "*")), 422, spec.CodeInUse, "secrets/gw")

	// PATCH without privateKey keeps the key; with a new certificate it
	// must still match, and a new pair re-seals.
	get := e.do("GET", Prefix+"/secrets/gw", "", nil)
	e.expect(get, http.StatusOK)
	patch := jsonOf(t, map[string]any{"certificate": other.CertPEM})
	e.expectError(e.do("PATCH", Prefix+"/secrets/gw", patch, hdr("If-Match", get.Header().Get("ETag"))), 422, spec.CodeInvalid, "privateKey")
	patch = jsonOf(t, map[string]any{"certificate": other.CertPEM, "privateKey": other.KeyPEM})
	w = e.do("PATCH", Prefix+"/secrets/gw", patch, hdr("If-Match", get.Header().Get("ETag")))
	if got := e.expect(w, http.StatusOK); got["hasPrivateKey"] != true || got["certificate"] != other.CertPEM {
		t.Fatalf("patch: %s", w.Body)
	}
	// PUT without privateKey keeps the (new) key.
	put := jsonOf(t, map[string]any{"type": "tls", "certificate": other.CertPEM})
	w = e.do("PUT", Prefix+"/secrets/gw", put, hdr("If-Match", w.Header().Get("ETag")))
	e.expect(w, http.StatusOK)
	stored, _, _ = e.store.Get(context.Background(), spec.KindSecret, "gw")
	if key, err := sealer.Open(stored.(*spec.Secret).SealedPrivateKey); err != nil || string(key) != other.KeyPEM {
		t.Fatalf("kept key: %v", err)
	}
	// A GET body sent back with PUT (hasPrivateKey, notAfter) changes nothing.
	get = e.do("GET", Prefix+"/secrets/gw", "", nil)
	e.expect(get, http.StatusOK)
	h := e.head()
	w = e.do("PUT", Prefix+"/secrets/gw", get.Body.String(), hdr("If-Match", get.Header().Get("ETag")))
	if got := e.expect(w, http.StatusOK); got["hasPrivateKey"] != true || e.head() != h {
		t.Fatalf("round trip: %s (head %d -> %d)", w.Body, h, e.head())
	}
	// A PUT switching to files drops the key.
	w = e.do("PUT", Prefix+"/secrets/gw", `{"type":"tls","files":{"certificateChain":"/etc/gw.crt","privateKey":"/etc/gw.key"}}`, hdr("If-Match", "*"))
	if got := e.expect(w, http.StatusOK); got["hasPrivateKey"] != nil {
		t.Fatalf("files secret: %s", w.Body)
	}

	// No response shows key material: every read endpoint, every version.
	bodies := []string{createBody, w.Body.String(), replay.Body.String()}
	for _, path := range []string{"/secrets", "/secrets/clients", "/listeners", "/audit", "/config/versions"} {
		r := e.do("GET", Prefix+path, "", nil)
		e.expect(r, http.StatusOK)
		bodies = append(bodies, r.Body.String())
	}
	for v := int64(1); v <= e.head(); v++ {
		r := e.do("GET", Prefix+"/config/versions/"+jsonOf(t, v), "", nil)
		e.expect(r, http.StatusOK)
		bodies = append(bodies, r.Body.String())
	}
	audit := bodies[len(bodies)-int(e.head())-2]
	if !strings.Contains(audit, `"hasPrivateKey":true`) {
		t.Fatalf("audit does not say a key was set: %s", audit)
	}
	for _, b := range bodies {
		if strings.Contains(b, pemMarker) || strings.Contains(b, sealedKeyField) || strings.Contains(b, seal.Prefix) {
			t.Fatalf("key material in a response: %s", b)
		}
	}

	// Nothing in the database holds a plaintext key.
	conn, err := pgx.Connect(context.Background(), e.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var hits int
	err = conn.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM controlplane.resources WHERE body::text LIKE '%' || $1 || '%') +
		(SELECT count(*) FROM controlplane.audit WHERE diff::text LIKE '%' || $1 || '%') +
		(SELECT count(*) FROM controlplane.idempotency WHERE position($2::bytea IN response) > 0)`, pemMarker, []byte(pemMarker)).Scan(&hits)
	if err != nil || hits != 0 {
		t.Fatalf("plaintext key stored %d times (%v)", hits, err)
	}
	// Create and the re-keying PATCH; the PUT keeping the key changed nothing.
	var sealedRows int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM controlplane.resources
		WHERE kind = 'secrets' AND body ? 'sealedPrivateKey'`).Scan(&sealedRows); err != nil || sealedRows != 2 {
		t.Fatalf("sealed revisions: %d (%v)", sealedRows, err)
	}
}

func TestInlineKeyNeedsSealer(t *testing.T) {
	e := newEnv(t)
	srv := pkitest.NewCA(t, "ca").Leaf(t, "gw.example.com")
	e.expectError(e.do("POST", Prefix+"/secrets", jsonOf(t, map[string]any{"name": "gw", "type": "tls", "certificate": srv.CertPEM, "privateKey": srv.KeyPEM}), newKeyHeader()),
		422, spec.CodeInvalid, "privateKey")
	if e.head() != 0 {
		t.Fatal("a version was made")
	}
	// An expired CA is accepted with a warning.
	e.h.timeNow = func() time.Time { return time.Now().Add(48 * time.Hour) }
	ca := pkitest.NewCA(t, "old")
	if w := e.create("secrets", jsonOf(t, map[string]any{"name": "old", "type": "ca", "ca": ca.CertPEM})); !strings.Contains(w.Header().Get("Warning"), "expired") {
		t.Fatalf("no expiry warning: %v", w.Header())
	}
	// Referenced files need no key.
	e.create("secrets", `{"name":"gw","type":"tls","files":{"certificateChain":"/etc/gw.crt","privateKey":"/etc/gw.key"}}`)
	e.create("listeners", `{"name":"https","port":10443,"tls":{"certificates":["gw"]}}`)
}
