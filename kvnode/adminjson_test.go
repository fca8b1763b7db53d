package kvnode

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/kvnode/antientropy"
	"github.com/portico-io/portico/kvnode/api"
	"github.com/portico-io/portico/kvnode/hint"
	"github.com/portico-io/portico/kvnode/membership"
	"github.com/portico-io/portico/kvnode/storage"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

var updateAdminJSON = flag.Bool("update", false, "rewrite testdata/admin/*.golden from the current responses")

// The admin responses are a wire contract (kvctl and operators' scripts
// parse them): each one, served by a node in a fixed state, must match
// testdata/admin/<name>.golden byte for byte, status line included. Run
// with -update to rewrite the files after an intended change.
func TestAdminResponsesJSON(t *testing.T) {
	n := adminFixtureNode(t)
	h, err := api.New(api.Config{Admin: n, InsecureNoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, method, path, body string }{
		{"ring", "GET", "/v1/ring", ""},
		{"members", "GET", "/admin/v1/members", ""},
		{"repair_status", "GET", "/admin/v1/repair", ""},
		{"repair", "POST", "/admin/v1/repair", ""},
		{"cleanup", "POST", "/admin/v1/cleanup", ""},
		{"restore", "POST", "/admin/v1/restore", ""},
		{"replace_conflict", "POST", "/admin/v1/replace", `{"node":"b"}`},
		{"join_conflict", "POST", "/admin/v1/join", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
			got := fmt.Appendf(nil, "HTTP %d\n%s", rec.Code, rec.Body.Bytes())
			path := filepath.Join("testdata", "admin", tc.name+".golden")
			if *updateAdminJSON {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s %s:\n got %s\nwant %s", tc.method, tc.path, got, want)
			}
		})
	}
}

// Encoded directly: a successful replace needs a live cluster, but its
// answer is a plain struct whose encoding is pinned here.
func TestReplaceResultJSON(t *testing.T) {
	res := ReplaceResult{Node: "n4", Replaced: "n2", Tokens: []uint64{1, 1 << 63}, KeysStreamed: 12, RangesVerified: 6, KeysRepaired: 1}
	rec := httptest.NewRecorder()
	h, err := api.New(api.Config{Admin: replaceOnly{res: res}, InsecureNoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/admin/v1/replace", strings.NewReader(`{"node":"n2"}`)))
	want := `{"node":"n4","replaced":"n2","tokens":[1,9223372036854775808],"keysStreamed":12,"rangesVerified":6,"keysRepaired":1}` + "\n"
	if rec.Code != http.StatusOK || rec.Body.String() != want {
		t.Fatalf("HTTP %d %s, want 200 %s", rec.Code, rec.Body, want)
	}
}

// replaceOnly answers Replace; every other admin call is unused here.
type replaceOnly struct {
	api.Admin
	res ReplaceResult
}

func (r replaceOnly) Replace(context.Context, string) (ReplaceResult, error) { return r.res, nil }

// adminFixtureNode is a node in a fixed state, without listeners or
// loops: "a" (rack r1) and "b" NORMAL, "c" JOINING, "d" LEFT, 1.5s after
// the last heartbeat of each, on a frozen clock.
func adminFixtureNode(t *testing.T) *Node {
	t.Helper()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := t0
	clock := func() time.Time { return now }
	st, err := storage.Open(t.TempDir(), storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	log := slog.New(slog.DiscardHandler)
	mem := membership.New(membership.Config{ID: "a", Addr: "10.0.0.1:7000", Rack: "r1", Generation: 100, N: 2, Interval: time.Second, Now: clock})
	mem.SetSelf(kvv1.MemberState_MEMBER_STATE_NORMAL, []uint64{1 << 60, 9 << 60})
	mem.Merge([]*kvv1.Member{
		{Id: "b", Addr: "10.0.0.2:7000", Generation: 200, Version: 3, Heartbeat: 41, State: kvv1.MemberState_MEMBER_STATE_NORMAL, Tokens: []uint64{5 << 60, 13 << 60}},
		{Id: "c", Addr: "10.0.0.3:7000", Rack: "r2", Generation: 300, Version: 2, Heartbeat: 7, State: kvv1.MemberState_MEMBER_STATE_JOINING, Tokens: []uint64{3 << 60, 11 << 60}},
		{Id: "d", Addr: "10.0.0.4:7000", Generation: 50, Version: 9, Heartbeat: 1000, State: kvv1.MemberState_MEMBER_STATE_LEFT, Tokens: []uint64{7 << 60}},
	})
	now = t0.Add(1500 * time.Millisecond)
	hints, err := hint.New(st, hint.Config{Now: clock, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{NodeID: "a", Replication: 2, Vnodes: 2, Now: clock, Logger: log, DataDir: t.TempDir()}
	n := &Node{cfg: cfg, st: st, mem: mem, hints: hints}
	n.rep = antientropy.New(antientropy.Config{Self: "a", Now: clock, Logger: log}, st, unreachablePeers{}, mem)
	// No transport or streamer: the moves asked for here are refused
	// before they reach a peer.
	n.moves = membership.NewProtocol(membership.ProtocolConfig{Logger: log}, mem, st, nil, nil)
	return n
}

// unreachablePeers fails every call, so a repair pass ends the same way
// every run.
type unreachablePeers struct{}

var errUnreachable = errors.New("unreachable (test)")

func (unreachablePeers) Tree(context.Context, string, *kvv1.TreeRequest) (*kvv1.TreeResponse, error) {
	return nil, errUnreachable
}

func (unreachablePeers) Scan(context.Context, string, *kvv1.ScanRequest) (*kvv1.ScanResponse, error) {
	return nil, errUnreachable
}

func (unreachablePeers) Apply(context.Context, string, []*kvv1.Entry) error { return errUnreachable }
