package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/controlplane/rollout"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/xdsclient"
	"github.com/portico-io/portico/internal/xdstest"
	ratelimitv1 "github.com/portico-io/portico/proto/portico/ratelimit/v1"
)

// deltaTypeState is a type in GET /admin/v1/nodes, with the field that
// says it reached its version without a response.
type deltaTypeState struct {
	AckedVersion string `json:"ackedVersion"`
	Unchanged    bool   `json:"unchanged"`
	Nack         *nack  `json:"nack"`
}

// deltaTypes returns node id's types from the node view.
func deltaTypes(api *adminAPI, id string) map[string]deltaTypeState {
	api.t.Helper()
	var list struct {
		Items []struct {
			ID    string                    `json:"id"`
			Types map[string]deltaTypeState `json:"types"`
		} `json:"items"`
	}
	if code, _ := api.do(http.MethodGet, "nodes", nil, nil, &list); code != http.StatusOK {
		api.t.Fatalf("GET nodes: %d", code)
	}
	for _, n := range list.Items {
		if n.ID == id {
			return n.Types
		}
	}
	return nil
}

// TestDeltaNodesCurrentAfterRouteChange: extauthz and ratelimitsvc speak
// delta xDS by default. A route change sends them nothing, yet the node
// view shows every one of their types at the new version; an API-key
// change sends extauthz its one shard, which it ACKs, while its other
// types are current unchanged.
func TestDeltaNodesCurrentAfterRouteChange(t *testing.T) {
	cp := startControlPlane(t, testdeps.Postgres(t), controlplane.Config{})
	api := newAdminAPI(t, cp.Admin)
	key, _ := api.seedKeyed()
	v := api.create("ratelimit-rules", map[string]any{"name": "per-consumer", "domain": "portico",
		"descriptors": []any{map[string]any{"key": "consumer"}}, "limit": 5, "window": "1s", "burst": 5}, nil)
	const ea, rl = "e2e-delta-extauthz", "e2e-delta-ratelimit"
	authz := authv3.NewAuthorizationClient(dialGRPC(t, startExtauthz(t, cp.XDS, "127.0.0.1:0", ea).GRPC))
	startRateLimit(t, cp.XDS, "127.0.0.1:0", rl)
	api.waitAcked(ea, "portico-extauthz", v, extauthzTypes...)
	api.waitAcked(rl, "portico-ratelimit", v, ratelimitTypes...)

	routes := api.patch("routes/keyed", map[string]any{"timeout": "2s"})
	api.waitAcked(ea, "portico-extauthz", routes, extauthzTypes...)
	api.waitAcked(rl, "portico-ratelimit", routes, ratelimitTypes...)
	for typ, ts := range deltaTypes(api, ea) {
		if !ts.Unchanged {
			t.Errorf("extauthz %s after a route change: %+v, want unchanged (nothing sent)", typ, ts)
		}
	}
	if ts := deltaTypes(api, rl)[compile.RateLimitRuleType]; !ts.Unchanged {
		t.Errorf("ratelimitsvc rules after a route change: %+v, want unchanged", ts)
	}

	// A new key changes one shard: sent and ACKed; the other types are
	// current without a response.
	var k struct {
		Key string `json:"key"`
	}
	keys := api.create("consumers/acme/keys", map[string]any{}, &k)
	api.waitAcked(ea, "portico-extauthz", keys, extauthzTypes...)
	types := deltaTypes(api, ea)
	if ts := types[compile.ApiKeyShardType]; ts.Unchanged {
		t.Errorf("API-key shards after a key change: %+v, want ACKed", ts)
	}
	if ts := types[compile.JwtProviderType]; !ts.Unchanged {
		t.Errorf("JWT providers after a key change: %+v, want unchanged", ts)
	}
	for _, kk := range []string{key, k.Key} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := authz.Check(ctx, keyedCheck(kk))
		cancel()
		if err != nil || resp.GetOkResponse() == nil {
			t.Fatalf("a key is refused over delta: %v %v", err, resp.GetDeniedResponse())
		}
	}
}

// pickyRateLimit runs a delta xDS client posing as a ratelimitsvc that
// rejects any rule set holding a rule named reject; it returns how many
// rule sets it rejected.
func pickyRateLimit(t *testing.T, xdsAddr, id, reject string) *atomic.Int64 {
	t.Helper()
	var nacks atomic.Int64
	runInProcess(t, "picky ratelimit client", func(ctx context.Context, ready chan<- struct{}) error {
		ready <- struct{}{}
		return xdsclient.Run(ctx, xdsclient.Config{Addr: xdsAddr, Node: &corev3.Node{Id: id, Cluster: "portico-ratelimit"},
			Types: ratelimitTypes, InsecurePlaintext: true, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
			Apply: func(_, _ string, res []*anypb.Any) error {
				for _, a := range res {
					var r ratelimitv1.RateLimitRule
					if err := a.UnmarshalTo(&r); err != nil {
						return err
					}
					if r.GetName() == reject {
						nacks.Add(1)
						return fmt.Errorf("rule %s refused by the test", reject)
					}
				}
				return nil
			}})
	})
	return &nacks
}

type rolloutState struct {
	ID    int64  `json:"id"`
	State string `json:"state"`
	Error string `json:"error"`
	Nodes struct {
		Total   int `json:"total"`
		Acked   int `json:"acked"`
		Nacked  int `json:"nacked"`
		Pending int `json:"pending"`
	} `json:"nodes"`
	RollbackVersion int64 `json:"rollbackVersion"`
}

// TestRolloutWithDeltaNodes: a rollout whose wave holds two delta
// ratelimitsvc nodes settles with both ACKed when the target changes only
// routes (nothing is sent to them), and rolls back when one of them NACKs a
// rule the target adds.
func TestRolloutWithDeltaNodes(t *testing.T) {
	cp := startControlPlane(t, testdeps.Postgres(t), controlplane.Config{DeployMode: rollout.ModeManual})
	api := newAdminAPI(t, cp.Admin)
	api.seedKeyed()
	base := api.create("ratelimit-rules", map[string]any{"name": "per-consumer", "domain": "portico",
		"descriptors": []any{map[string]any{"key": "consumer"}}, "limit": 5, "window": "1s", "burst": 5}, nil)
	const rl, picky = "e2e-rollout-delta-rl", "e2e-rollout-delta-picky"
	startRateLimit(t, cp.XDS, "127.0.0.1:0", rl)
	nacks := pickyRateLimit(t, cp.XDS, picky, "refused")

	start := func(key string, body map[string]any) int64 {
		t.Helper()
		var raw json.RawMessage
		var ro rolloutState
		if code, _ := api.do(http.MethodPost, "config/rollouts", body, map[string]string{"Idempotency-Key": key}, &raw); code != http.StatusCreated || json.Unmarshal(raw, &ro) != nil {
			t.Fatalf("start rollout: %d %s", code, raw)
		}
		return ro.ID
	}
	get := func(id int64) rolloutState {
		t.Helper()
		var ro rolloutState
		if code, _ := api.do(http.MethodGet, "config/rollouts/"+strconv.FormatInt(id, 10), nil, nil, &ro); code != http.StatusOK {
			t.Fatalf("GET rollout %d: %d", id, code)
		}
		return ro
	}
	ended := func(id int64) rolloutState {
		t.Helper()
		var ro rolloutState
		xdstest.Eventually(t, 30*time.Second, fmt.Sprintf("rollout %d to end", id), func() bool { ro = get(id); return ro.State != "running" })
		return ro
	}
	if ro := ended(start("delta-deploy", map[string]any{"targetVersion": base, "bakeSeconds": 1, "waves": []any{map[string]any{"percent": 100}}})); ro.State != "succeeded" {
		t.Fatalf("first deployment: %+v", ro)
	}
	api.waitAcked(rl, "portico-ratelimit", base, ratelimitTypes...)
	api.waitAcked(picky, "portico-ratelimit", base, ratelimitTypes...)

	// A route change: the wave settles with both nodes ACKed although
	// neither is sent anything. A one-hour bake and minNodes 2 make the
	// node counts the only way to see it settle.
	routes := api.patch("routes/keyed", map[string]any{"timeout": "2s"})
	id := start("delta-routes", map[string]any{"targetVersion": routes, "bakeSeconds": 3600, "minNodes": 2,
		"waves": []any{map[string]any{"percent": 100}}})
	xdstest.Eventually(t, convergeTimeout, "both delta nodes counted as ACKing the route change", func() bool {
		n := get(id).Nodes
		return n.Total == 2 && n.Acked == 2 && n.Pending == 0
	})
	for _, node := range []string{rl, picky} {
		if ts := deltaTypes(api, node)[compile.RateLimitRuleType]; ts.AckedVersion != strconv.FormatInt(routes, 10) || !ts.Unchanged {
			t.Fatalf("%s rules during the route rollout: %+v, want unchanged at %d", node, ts, routes)
		}
	}
	if code, _ := api.do(http.MethodPost, "config/rollouts/"+strconv.FormatInt(id, 10)+"/abort", nil, nil, nil); code != http.StatusOK {
		t.Fatalf("abort: %d", code)
	}
	ended(id)
	if ro := ended(start("delta-routes-short", map[string]any{"targetVersion": routes, "bakeSeconds": 1, "minNodes": 2,
		"waves": []any{map[string]any{"percent": 100}}})); ro.State != "succeeded" || ro.Nodes.Acked != 2 || ro.Nodes.Pending != 0 {
		t.Fatalf("route rollout with delta nodes: %+v, want succeeded with both ACKed", ro)
	}

	// A rule the picky node refuses: it is sent (the type changed), NACKed,
	// and the wave rolls back; the real ratelimitsvc ACKs it.
	bad := api.create("ratelimit-rules", map[string]any{"name": "refused", "domain": "portico",
		"descriptors": []any{map[string]any{"key": "tenant"}}, "limit": 5, "window": "1s", "burst": 5}, nil)
	ro := ended(start("delta-refused", map[string]any{"targetVersion": bad, "bakeSeconds": 3600, "maxNackRatio": 0,
		"waves": []any{map[string]any{"percent": 100}}}))
	if ro.State != "rolled_back" || !strings.Contains(ro.Error, picky) || ro.Nodes.Nacked != 1 {
		t.Fatalf("rollout of a refused rule: %+v, want rolled back naming %s", ro, picky)
	}
	if ts := deltaTypes(api, picky)[compile.RateLimitRuleType]; ts.Nack == nil || ts.Nack.Version != strconv.FormatInt(bad, 10) {
		t.Fatalf("picky node after its NACK: %+v", ts)
	}
	if nacks.Load() == 0 {
		t.Fatal("the picky node was never sent the refused rule")
	}
	// The rollback version equals the baseline: the picky node is sent the
	// removal of what it refused and ACKs it, the other node is current.
	api.waitAcked(picky, "portico-ratelimit", ro.RollbackVersion, ratelimitTypes...)
	api.waitAcked(rl, "portico-ratelimit", ro.RollbackVersion, ratelimitTypes...)
}
