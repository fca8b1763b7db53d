package e2e_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	jose "github.com/go-jose/go-jose/v4"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/internal/testdeps"
)

// TestRollbackKeepsRevocations: rolling the configuration back to a version
// from before a token was revoked or an API key deleted must not bring the
// credential back. A rollback (controlplane/store/apply.go Rollback) keeps
// the head's consumers, API keys and revocations, so undoing a bad route
// change — by hand, or by the rollout controller on a NACK ratio — leaves
// every credential revoked since revoked.
func TestRollbackKeepsRevocations(t *testing.T) {
	cp := startControlPlane(t, testdeps.Postgres(t), controlplane.Config{})
	ea := startExtauthz(t, cp.XDS, "127.0.0.1:0", extauthzNode)
	api := newAdminAPI(t, cp.Admin)
	pk, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	idp := signer{t, pk}
	jwks, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &pk.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	api.create("clusters", map[string]any{"name": "echo", "endpoints": []any{map[string]any{"address": "127.0.0.1", "port": 18900}}}, nil)
	api.create("jwt-providers", map[string]any{"name": "idp", "issuer": issuer, "audiences": []string{"portico"},
		"inlineJwks": string(jwks), "algorithms": []string{"ES256"}}, nil)
	api.create("consumers", map[string]any{"name": "acme", "tenant": "acme"}, nil)
	var apiKey struct{ ID, Key string }
	api.create("consumers/acme/keys", map[string]any{}, &apiKey)
	api.create("routes", map[string]any{"name": "echo", "match": map[string]any{"pathPrefix": "/echo"}, "cluster": "echo",
		"auth": map[string]any{"mode": "jwt", "provider": "idp"}}, nil)
	before := api.create("routes", map[string]any{"name": "keys", "match": map[string]any{"pathPrefix": "/keys"}, "cluster": "echo",
		"auth": map[string]any{"mode": "apikey"}}, nil)

	s := &fullStack{api: api, gw: fetchGatewayView(t, cp.XDS, "e2e-gateway-rollback", before),
		authz: authv3.NewAuthorizationClient(dialGRPC(t, ea.GRPC))}
	tok := idp.token("alice", "", "stolen")
	jwtReq := func() *httpRequest {
		return newRequest("GET", "http://api.e2e.test/echo/x", "authorization", "Bearer "+tok)
	}
	keyReq := func() *httpRequest { return newRequest("GET", "http://api.e2e.test/keys/x", "x-api-key", apiKey.Key) }
	api.waitAcked(extauthzNode, "portico-extauthz", before, extauthzTypes...)
	allowedAs(t, "the token before its revocation", s.send(t, jwtReq()), "alice")
	allowedAs(t, "the key before its deletion", s.send(t, keyReq()), "acme")

	// The token leaks and is revoked; the key is deleted.
	api.create("revocations", map[string]any{"jti": "stolen", "expiresAt": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, nil)
	v := api.remove("consumers/acme/keys/" + apiKey.ID)
	api.waitAcked(extauthzNode, "portico-extauthz", v, extauthzTypes...)
	deniedWith(t, "the revoked token", s.send(t, jwtReq()), http.StatusUnauthorized, "token_revoked")
	deniedWith(t, "the deleted key", s.send(t, keyReq()), http.StatusUnauthorized, "invalid_api_key")

	// An unrelated change goes wrong and is rolled back.
	api.patch("routes/echo", map[string]any{"timeout": "1s"})
	var rb struct {
		Version int64 `json:"version"`
	}
	if code, _ := api.do(http.MethodPost, "config/rollback", map[string]any{"toVersion": before}, nil, &rb); code != http.StatusCreated {
		t.Fatalf("rollback: %d", code)
	}
	api.waitAcked(extauthzNode, "portico-extauthz", rb.Version, compile.RevocationListType, compile.ApiKeyShardType)
	if o := s.send(t, jwtReq()); o.check.GetOkResponse() != nil {
		t.Errorf("after a rollback to version %d the revoked token is allowed again", before)
	}
	if o := s.send(t, keyReq()); o.check.GetOkResponse() != nil {
		t.Errorf("after a rollback to version %d the deleted API key is allowed again", before)
	}
}
