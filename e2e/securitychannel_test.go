package e2e_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	jose "github.com/go-jose/go-jose/v4"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/rollout"
	"github.com/portico-io/portico/extauthz/authz"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/xdstest"
)

// TestSecurityChannelBypassesRollouts: while a rollout with a one-hour bake
// holds every node outside its first wave at the baseline version, a
// revoked JWT and a deleted API key are refused by every extauthz within
// seconds. extauthz's kinds (JWT providers, API-key shards, revocations)
// are the security channel: they follow the head, never the waves.
func TestSecurityChannelBypassesRollouts(t *testing.T) {
	cp := startControlPlane(t, testdeps.Postgres(t), controlplane.Config{DeployMode: rollout.ModeManual})
	api := newAdminAPI(t, cp.Admin)
	pk, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	idp := signer{t, pk}
	jwks, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &pk.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	api.create("jwt-providers", map[string]any{"name": "idp", "issuer": issuer, "audiences": []string{"portico"},
		"inlineJwks": string(jwks), "algorithms": []string{"ES256"}}, nil)
	key, _ := api.seedKeyed()
	var keys struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	if code, _ := api.do(http.MethodGet, "consumers/acme/keys", nil, nil, &keys); code != http.StatusOK || len(keys.Items) != 1 {
		t.Fatalf("list keys: %d %+v", code, keys)
	}
	v := api.create("routes", map[string]any{"name": "echo", "match": map[string]any{"pathPrefix": "/echo"}, "cluster": "echo",
		"auth": map[string]any{"mode": "jwt", "provider": "idp"}}, nil)

	// Manual mode: nothing is served before an operator deploys it.
	rollOut := func(key string, body map[string]any) (id int64) {
		t.Helper()
		var raw json.RawMessage
		var ro struct {
			ID    int64  `json:"id"`
			State string `json:"state"`
		}
		if code, _ := api.do(http.MethodPost, "config/rollouts", body, map[string]string{"Idempotency-Key": key}, &raw); code != http.StatusCreated || json.Unmarshal(raw, &ro) != nil || ro.State != "running" {
			t.Fatalf("start rollout: %d %s", code, raw)
		}
		return ro.ID
	}
	state := func(id int64) (state string, wave int) {
		var ro struct {
			State string `json:"state"`
			Wave  int    `json:"wave"`
		}
		var raw json.RawMessage
		if code, _ := api.do(http.MethodGet, "config/rollouts/"+strconv.FormatInt(id, 10), nil, nil, &raw); code != http.StatusOK || json.Unmarshal(raw, &ro) != nil {
			t.Fatalf("GET rollout %d: %d", id, code)
		}
		return ro.State, ro.Wave
	}
	ids := []string{"e2e-sec-ea-1", "e2e-sec-ea-2"}
	var clients []authv3.AuthorizationClient
	for _, id := range ids {
		ea := startExtauthz(t, cp.XDS, "127.0.0.1:0", id)
		clients = append(clients, authv3.NewAuthorizationClient(dialGRPC(t, ea.GRPC)))
	}
	first := rollOut("deploy-1", map[string]any{"targetVersion": v, "bakeSeconds": 1, "waves": []any{map[string]any{"percent": 100}}})
	xdstest.Eventually(t, 20*time.Second, "the first deployment", func() bool { s, _ := state(first); return s == "succeeded" })
	for _, id := range ids {
		api.waitAcked(id, "portico-extauthz", v, extauthzTypes...)
	}
	tok := idp.token("alice", "", "leaked")
	jwtCheck := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: http.MethodGet, Path: "/echo", Host: "example.test", Headers: map[string]string{"authorization": "Bearer " + tok}}},
		ContextExtensions: map[string]string{authz.CtxMode: "jwt", authz.CtxRoute: "echo", authz.CtxProvider: "idp"},
	}}
	allowed := func(c authv3.AuthorizationClient, req *authv3.CheckRequest) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := c.Check(ctx, req)
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		return resp.GetOkResponse() != nil
	}
	for i, c := range clients {
		if !allowed(c, jwtCheck) || !allowed(c, keyedCheck(key)) {
			t.Fatalf("extauthz %d refuses the credentials before they are revoked", i)
		}
	}

	// A route change rolls out in waves with a one-hour bake; the first
	// wave holds no node, so everyone stays at the baseline.
	target := api.patch("routes/keyed", map[string]any{"timeout": "2s"})
	baking := rollOut("bake-1h", map[string]any{"targetVersion": target, "bakeSeconds": 3600,
		"waves": []any{map[string]any{"groups": []string{"canary"}}, map[string]any{"percent": 100}}})

	// The token leaks and the key is stolen: both are revoked mid-rollout.
	start := time.Now()
	api.create("revocations", map[string]any{"jti": "leaked", "expiresAt": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, nil)
	api.remove("consumers/acme/keys/" + keys.Items[0].ID)
	xdstest.Eventually(t, 5*time.Second, "every extauthz to refuse the revoked token and the deleted key", func() bool {
		for _, c := range clients {
			if allowed(c, jwtCheck) || allowed(c, keyedCheck(key)) {
				return false
			}
		}
		return true
	})
	t.Logf("revocations enforced by every extauthz %s after the admin API call, during rollout %d", time.Since(start).Round(time.Millisecond), baking)
	if s, wave := state(baking); s != "running" || wave != 0 {
		t.Fatalf("the rollout must still be baking its first wave: %s, wave %d", s, wave)
	}
}
