package e2e_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/genproto/googleapis/rpc/code"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/extauthz"
	"github.com/portico-io/portico/internal/eventually"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/xdstest"
)

// readyz returns extauthz's /readyz status and body.
func readyz(t *testing.T, httpAddr string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestUnreceivablePolicyIsLoud: a response the client cannot receive (here
// over a receive limit set small for the test) turns extauthz not ready
// with the reason and a metric, and the control plane lists the node as
// failing with the stream error; decisions continue on the last good
// policy meanwhile.
func TestUnreceivablePolicyIsLoud(t *testing.T) {
	const node = "e2e-stale-extauthz"
	dbURL := testdeps.Postgres(t)
	cp := startControlPlane(t, dbURL, controlplane.Config{})
	api := newAdminAPI(t, cp.Admin)
	key, v := api.seedKeyed()
	cfg := extauthz.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", XDSAddr: cp.XDS, NodeID: node, StateDir: t.TempDir(),
		XDSMinBackoff: 20 * time.Millisecond, XDSMaxBackoff: 200 * time.Millisecond, XDSMaxRecvMsgBytes: 256 << 10,
		InsecurePlaintext: true, Logger: testLogger()}
	ea := runInProcess(t, "extauthz", func(ctx context.Context, ready chan<- extauthz.Addrs) error {
		cfg.Ready = ready
		return extauthz.Run(ctx, cfg)
	})
	api.waitAcked(node, "portico-extauthz", v, extauthzTypes...)
	xdstest.Eventually(t, 10*time.Second, "extauthz ready", func() bool {
		c, _ := readyz(t, ea.HTTP)
		return c == http.StatusOK
	})
	eaMetrics := newAdminAPI(t, ea.HTTP)
	if s := eaMetrics.metric("portico_extauthz_policy_stale"); s != 0 {
		t.Fatalf("stale = %v while in sync", s)
	}

	big := bulkKeys(t, dbURL, 400) // about 480 kB of ApiKeyShards
	var body string
	xdstest.Eventually(t, 10*time.Second, "extauthz not ready, naming why", func() bool {
		var c int
		c, body = readyz(t, ea.HTTP)
		return c == http.StatusServiceUnavailable && strings.Contains(body, "policy stale since") && strings.Contains(body, "larger than max")
	})
	t.Logf("/readyz: %s", strings.TrimSpace(body))
	// Each reconnect applies the small types before the oversized one fails
	// again; that must not clear the failure, even for a moment.
	eventually.Always(t, time.Second, "portico_extauthz_policy_stale = 1 across reconnects", func() bool {
		return eaMetrics.metric("portico_extauthz_policy_stale") == 1
	})
	if n := eaMetrics.metric(`portico_extauthz_policy_stream_failures_total{code="ResourceExhausted"}`); n < 1 {
		t.Fatalf("stream failures (ResourceExhausted) = %v", n)
	}

	type failingNode struct {
		ID              string `json:"id"`
		State           string `json:"state"`
		LastStreamError *struct {
			Error string `json:"error"`
			Count int    `json:"count"`
		} `json:"lastStreamError"`
	}
	var n failingNode
	xdstest.Eventually(t, 10*time.Second, "the node listed as failing", func() bool {
		var list struct{ Items []failingNode }
		if c, _ := api.do(http.MethodGet, "nodes", nil, nil, &list); c != http.StatusOK {
			t.Fatalf("GET nodes: %d", c)
		}
		for _, it := range list.Items {
			if it.ID == node {
				n = it
				return it.State == "failing"
			}
		}
		return false
	})
	if n.LastStreamError == nil || !strings.Contains(n.LastStreamError.Error, "ApiKeyShard version "+strconv.FormatInt(big, 10)) {
		t.Fatalf("failing node's stream error: %+v", n.LastStreamError)
	}
	t.Logf("node view: %s x%d", n.LastStreamError.Error, n.LastStreamError.Count)

	// Static stability: the last good policy keeps deciding.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := authv3.NewAuthorizationClient(dialGRPC(t, ea.GRPC)).Check(ctx, keyedCheck(key))
	if err != nil || resp.GetStatus().GetCode() != int32(code.Code_OK) {
		t.Fatalf("a key of the last good policy: %v %v", resp.GetStatus(), err)
	}
}
