package e2e_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/internal/testdeps"
)

// TestImportedKeyAuthenticates: keys migrated from another gateway arrive
// as the SHA-256 of their secrets through POST /consumers:import, in one
// version, and extauthz allows a client presenting a secret whose hash was
// imported; a secret that was not is refused.
func TestImportedKeyAuthenticates(t *testing.T) {
	dbURL := testdeps.Postgres(t)
	cp := startControlPlane(t, dbURL, controlplane.Config{})
	ea := startExtauthz(t, cp.XDS, "127.0.0.1:0", "e2e-import-extauthz")
	api := newAdminAPI(t, cp.Admin)
	_, v := api.seedKeyed()
	api.waitAcked("e2e-import-extauthz", "portico-extauthz", v, extauthzTypes...)

	type key struct {
		ID     string `json:"id,omitempty"`
		SHA256 string `json:"sha256"`
	}
	type consumer struct {
		Name   string `json:"name"`
		Tenant string `json:"tenant"`
		Keys   []key  `json:"keys"`
	}
	secret := func(c, k int) string { return fmt.Sprintf("legacy-gw-secret-%d-%d", c, k) }
	var body struct {
		Consumers []consumer `json:"consumers"`
	}
	for c := range 20 {
		cons := consumer{Name: fmt.Sprintf("legacy-%02d", c), Tenant: "legacy"}
		for k := range 50 {
			sum := sha256.Sum256([]byte(secret(c, k)))
			cons.Keys = append(cons.Keys, key{SHA256: hex.EncodeToString(sum[:])})
		}
		body.Consumers = append(body.Consumers, cons)
	}
	var answer struct {
		Version int64 `json:"version"`
		Keys    struct {
			Created int `json:"created"`
		} `json:"keys"`
	}
	imported := api.create("consumers:import", body, &answer)
	if imported != v+1 || answer.Version != imported || answer.Keys.Created != 1000 {
		t.Fatalf("import: version %d after %d, %+v", imported, v, answer)
	}
	api.waitAcked("e2e-import-extauthz", "portico-extauthz", imported, extauthzTypes...)

	client := authv3.NewAuthorizationClient(dialGRPC(t, ea.GRPC))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tc := range []struct {
		key  string
		want code.Code
	}{{secret(7, 42), code.Code_OK}, {secret(19, 0), code.Code_OK}, {secret(20, 0), code.Code_UNAUTHENTICATED}} {
		resp, err := client.Check(ctx, keyedCheck(tc.key))
		if err != nil {
			t.Fatal(err)
		}
		if got := code.Code(resp.GetStatus().GetCode()); got != tc.want {
			t.Fatalf("key %s: %v, want %v", tc.key[:10]+"…", got, tc.want)
		}
		if tc.want == code.Code_OK {
			if c := resp.GetOkResponse(); c == nil {
				t.Fatalf("no OK response: %v", resp)
			}
		}
	}
	// The imported keys are listed under their consumer, without hashes.
	var list struct {
		Items []map[string]any `json:"items"`
	}
	if code, _ := api.do(http.MethodGet, "consumers/legacy-07/keys?limit=1000", nil, nil, &list); code != http.StatusOK || len(list.Items) != 50 {
		t.Fatalf("list: %d, %d items", code, len(list.Items))
	}
	if _, ok := list.Items[0]["sha256"]; ok {
		t.Fatalf("hash listed: %v", list.Items[0])
	}
}
