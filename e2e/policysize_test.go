package e2e_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/controlplane/store"
	"github.com/portico-io/portico/internal/testdeps"
)

// bulkKeys writes n API keys of consumer acme, each with scopes long
// enough to make the policy big, as one version straight through the store
// (one admin POST per key would take minutes). It returns the version.
func bulkKeys(t *testing.T, dbURL string, n int) int64 {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{DatabaseURL: dbURL, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	scopes := make([]string, 20)
	for i := range scopes {
		scopes[i] = fmt.Sprintf("service-%02d.example.test:resource-collection:read-write", i)
	}
	changes := make([]store.Change, n)
	for i := range changes {
		sum := sha256.Sum256([]byte(fmt.Sprintf("bulk-secret-%d", i)))
		name := fmt.Sprintf("bulk-%06d", i)
		changes[i] = store.Change{Kind: spec.KindAPIKey, Name: name,
			Resource: &spec.APIKey{Name: name, Consumer: "acme", SHA256: hex.EncodeToString(sum[:]), Scopes: scopes}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := st.Apply(ctx, store.Meta{Author: "e2e", Reason: "bulk keys"}, changes, nil)
	if err != nil {
		t.Fatalf("bulk keys: %v", err)
	}
	return res.Version
}

// extauthzResponseBytes is the size of the state-of-the-world response
// carrying every ApiKeyShard of version v.
func extauthzResponseBytes(t *testing.T, dbURL string, v int64) int {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{DatabaseURL: dbURL, MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg, err := st.ConfigAt(context.Background(), v)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := compile.Compile(cfg, compile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range snap.GetResources(compile.ApiKeyShardType) {
		a, err := anypb.New(r)
		if err != nil {
			t.Fatal(err)
		}
		n += proto.Size(a) + 4
	}
	return n
}

// TestPolicyOver4MiBReachesExtauthz: an auth policy whose ApiKeyShards
// exceed gRPC's default 4 MiB in one response still reaches extauthz (the
// receive limit is configured with room, the control plane's send limit
// matches), and a key created after it is allowed. extauthz speaks delta
// xDS (the default), whose first response of a stream carries every shard
// at once, as state of the world does; that a later key change travels
// alone in its shard is measured in internal/xdsclient's
// TestDeltaSendsOnlyTheChange.
func TestPolicyOver4MiBReachesExtauthz(t *testing.T) {
	dbURL := testdeps.Postgres(t)
	cp := startControlPlane(t, dbURL, controlplane.Config{})
	ea := startExtauthz(t, cp.XDS, "127.0.0.1:0", "e2e-big-extauthz")
	api := newAdminAPI(t, cp.Admin)
	_, v := api.seedKeyed()
	api.waitAcked("e2e-big-extauthz", "portico-extauthz", v, extauthzTypes...)

	big := bulkKeys(t, dbURL, 4000)
	if n := extauthzResponseBytes(t, dbURL, big); n <= 4<<20 {
		t.Fatalf("the ApiKeyShard response is %d bytes; the test needs more than 4 MiB", n)
	} else {
		t.Logf("ApiKeyShard response: %d bytes", n)
	}
	var last struct{ Key string }
	last2 := api.create("consumers/acme/keys", map[string]any{"scopes": []string{"echo:read"}}, &last)
	api.waitAcked("e2e-big-extauthz", "portico-extauthz", last2, extauthzTypes...)
	for _, addr := range []string{ea.GRPC} {
		client := authv3.NewAuthorizationClient(dialGRPC(t, addr))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, key := range []string{last.Key, "bulk-secret-3999"} {
			resp, err := client.Check(ctx, keyedCheck(key))
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetStatus().GetCode() != int32(code.Code_OK) {
				t.Fatalf("extauthz %s: a key denied (%v)", addr, resp.GetStatus())
			}
		}
	}
}
