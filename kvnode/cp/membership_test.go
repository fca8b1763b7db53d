package cp_test

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/eventually"
	"github.com/portico-io/portico/kvnode/cp"
)

func (gr *group) members(node int) []cp.Member {
	gr.t.Helper()
	r := gr.must("GET", node, "/admin/v1/cp/members", nil, nil, http.StatusOK)
	var body struct {
		Items []cp.Member `json:"items"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil {
		gr.t.Fatal(err)
	}
	return body.Items
}

func voterIDs(ms []cp.Member) string {
	var ids []string
	for _, m := range ms {
		if m.Suffrage == "Voter" {
			ids = append(ids, m.ID)
		}
	}
	sort.Strings(ids)
	return strings.Join(ids, ",")
}

func TestAddAndRemoveVoterThroughAdminAPI(t *testing.T) {
	gr := newGroup(t, 3)
	leader := gr.waitLeader()
	f := gr.follower(leader)
	acked := map[string]string{}
	gr.writeKeys(0, 20, []int{0, 1, 2}, acked)

	// Bad bodies change nothing.
	for body, field := range map[string]string{
		`{"id":"","raftAddr":"127.0.0.1:1"}`: "id",
		`{"id":"c9","raftAddr":"nope"}`:      "raftAddr",
		`{"id":"c9","extra":1}`:              "body",
	} {
		r := gr.must("POST", f, "/admin/v1/cp/members", []byte(body), nil, http.StatusBadRequest)
		if _, got := errCode(t, r); got != field {
			t.Errorf("%s: field %q, want %q", body, got, field)
		}
	}

	// A fourth node joins as a voter (the request goes to a follower and is
	// forwarded) and catches up.
	nn := gr.addNode()
	add, _ := json.Marshal(map[string]string{"id": gr.nodes[nn].id, "raftAddr": gr.nodes[nn].raftAddr})
	gr.must("POST", f, "/admin/v1/cp/members", add, nil, http.StatusOK)
	if got := voterIDs(gr.members(leader)); got != "c0,c1,c2,c3" {
		t.Fatalf("voters %s", got)
	}
	eventually.True(t, 10*time.Second, "the new voter to catch up", func() bool {
		r, err := do(t.Context(), gr.client, "GET", gr.nodes[nn].httpAddr, "/v1/cp/ks/k19?stale=true", nil, nil)
		return err == nil && string(r.body) == "v19"
	})
	gr.checkKeys(nn, acked, "?stale=true")

	// Remove one original voter, then kill another: the new node is needed
	// for the quorum (2 of the 3 voters left), so writes going through
	// prove it votes.
	gr.must("DELETE", nn, "/admin/v1/cp/members/"+gr.nodes[f].id, nil, nil, http.StatusOK)
	eventually.True(t, 10*time.Second, "the removal to reach every voter", func() bool {
		for _, i := range []int{leader, nn} {
			if len(strings.Split(voterIDs(gr.members(i)), ",")) != 3 {
				return false
			}
		}
		return true
	})
	gr.kill(f)
	gr.kill(leader)
	leader = gr.waitLeader()
	gr.writeKeys(20, 30, []int{leader}, acked)
	gr.checkKeys(nn, acked, "")
}
