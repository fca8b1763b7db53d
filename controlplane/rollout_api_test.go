package controlplane_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/controlplane/rollout"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/xdstest"
)

type rolloutView struct {
	ID    int64  `json:"id"`
	State string `json:"state"`
	Wave  int    `json:"wave"`
}

func startRollout(t *testing.T, admin, key string, body map[string]any, want int) rolloutView {
	t.Helper()
	var raw json.RawMessage
	code, _ := call(t, http.MethodPost, "http://"+admin+"/admin/v1/config/rollouts", body, map[string]string{"Idempotency-Key": key}, &raw)
	if code != want {
		t.Fatalf("POST rollouts: %d %s, want %d", code, raw, want)
	}
	var out rolloutView
	_ = json.Unmarshal(raw, &out)
	return out
}

func getRollout(t *testing.T, admin string, id int64) rolloutView {
	t.Helper()
	var out rolloutView
	if code, _ := call(t, http.MethodGet, "http://"+admin+"/admin/v1/config/rollouts/"+strconv.FormatInt(id, 10), nil, nil, &out); code != http.StatusOK {
		t.Fatalf("GET rollout %d: %d", id, code)
	}
	return out
}

// Manual deploy mode through the admin API: nothing is served until a
// rollout deploys it; a canary wave moves only the canary gRPC client; abort
// returns it to the baseline; POST is idempotent and one rollout runs at a time.
func TestRolloutAPI(t *testing.T) {
	cp := startWith(t, controlplane.Config{AdminAddr: "127.0.0.1:0", XDSAddr: "127.0.0.1:0",
		DatabaseURL: testdeps.Postgres(t), DeployMode: rollout.ModeManual})
	admin := cp.addrs.Admin
	a, b := xdstest.StartBackend(t, "a"), xdstest.StartBackend(t, "b")
	create(t, admin, "clusters", map[string]any{"name": "echo", "endpoints": []any{map[string]any{"address": "127.0.0.1", "port": a.Port}}})
	create(t, admin, "routes", map[string]any{"name": "echo", "match": map[string]any{"hosts": []string{"echo.grpc"}, "pathPrefix": "/"}, "cluster": "echo"})
	canary := xdstest.Dial(t, cp.addrs.XDS, "grpc-canary", "canary", "echo.grpc")
	stable := xdstest.Dial(t, cp.addrs.XDS, "grpc-stable", "default", "echo.grpc")

	first := startRollout(t, admin, "deploy-1", map[string]any{"waves": []any{map[string]any{"percent": 100}}, "bakeSeconds": 1}, http.StatusCreated)
	xdstest.Eventually(t, 20*time.Second, "the first rollout to succeed", func() bool { return getRollout(t, admin, first.ID).State == "succeeded" })
	if xdstest.Reached(canary) != "a" || xdstest.Reached(stable) != "a" {
		t.Fatal("after the first rollout both clients must reach a")
	}

	// A committed change is not served in manual mode.
	v := update(t, admin, "clusters", "echo", map[string]any{"endpoints": []any{map[string]any{"address": "127.0.0.1", "port": b.Port}}})
	for range 5 {
		if got := xdstest.Reached(stable); got != "a" {
			t.Fatalf("manual mode served an undeployed version: %q", got)
		}
	}
	body := map[string]any{"targetVersion": v, "waves": []any{map[string]any{"groups": []string{"canary"}}, map[string]any{"percent": 100}}, "bakeSeconds": 60}
	ro := startRollout(t, admin, "canary-1", body, http.StatusCreated)
	if again := startRollout(t, admin, "canary-1", body, http.StatusCreated); again.ID != ro.ID {
		t.Fatalf("replayed POST started rollout %d, want %d", again.ID, ro.ID)
	}
	startRollout(t, admin, "canary-1", map[string]any{"waves": []any{map[string]any{"percent": 50}}}, http.StatusUnprocessableEntity)
	startRollout(t, admin, "canary-2", body, http.StatusConflict)
	startRollout(t, admin, "bad", map[string]any{"waves": []any{map[string]any{"percent": 101}}}, http.StatusUnprocessableEntity)

	xdstest.Eventually(t, 10*time.Second, "the canary client to reach b", func() bool { return xdstest.Reached(canary) == "b" })
	for range 5 {
		if got := xdstest.Reached(stable); got != "a" {
			t.Fatalf("stable client outside the canary wave reached %q", got)
		}
	}
	var aborted rolloutView
	if code, _ := call(t, http.MethodPost, "http://"+admin+"/admin/v1/config/rollouts/"+strconv.FormatInt(ro.ID, 10)+"/abort", nil, nil, &aborted); code != http.StatusOK || aborted.State != "aborted" {
		t.Fatalf("abort: %d %+v", code, aborted)
	}
	xdstest.Eventually(t, 10*time.Second, "the canary client to return to a", func() bool { return xdstest.Reached(canary) == "a" })
}
