package cp_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/eventually"
)

// acked writes k0..k(n-1) through rotating nodes and returns what was
// acknowledged.
func (gr *group) writeKeys(from, to int, via []int, acked map[string]string) {
	gr.t.Helper()
	for i := from; i < to; i++ {
		k, v := fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)
		gr.must("PUT", via[i%len(via)], "/v1/cp/ks/"+k, []byte(v), nil, http.StatusOK)
		acked[k] = v
	}
}

func (gr *group) checkKeys(node int, acked map[string]string, query string) {
	gr.t.Helper()
	for k, v := range acked {
		r := gr.must("GET", node, "/v1/cp/ks/"+k+query, nil, nil, http.StatusOK)
		if string(r.body) != v {
			gr.t.Fatalf("%s on %s = %q, want %q", k, gr.nodes[node].id, r.body, v)
		}
	}
}

func (gr *group) waitRestored(i int) {
	gr.t.Helper()
	select {
	case <-gr.nodes[i].restored:
	case <-time.After(10 * time.Second):
		gr.t.Fatalf("%s did not restore a snapshot", gr.nodes[i].id)
	}
}

func TestLeaderKillRestartAndRecovery(t *testing.T) {
	gr := newGroup(t, 3)
	acked := map[string]string{}
	old := gr.waitLeader()
	gr.writeKeys(0, 30, []int{0, 1, 2}, acked)

	// Kill the leader: a new one is elected among the others and every
	// acknowledged write is still there, through either of them.
	gr.kill(old)
	leader := gr.waitLeader()
	if leader == old {
		t.Fatal("killed node still leads")
	}
	f := gr.follower(leader)
	gr.checkKeys(f, acked, "")
	gr.writeKeys(30, 50, []int{leader, f}, acked)

	// Snapshot every running node (compacting its log to the last
	// trailingLogs entries), then write more, so a restart needs the
	// snapshot and the log after it.
	for _, i := range []int{leader, f} {
		if err := gr.groupOf(i).Snapshot(); err != nil {
			t.Fatalf("snapshot %s: %v", gr.nodes[i].id, err)
		}
	}
	gr.writeKeys(50, 60, []int{f}, acked)

	// The old leader comes back; the entries it misses were compacted
	// away, so the leader sends it the snapshot, then the log after it.
	gr.start(old)
	gr.waitRestored(old)
	last := gr.must("GET", leader, "/v1/cp/ks/k59", nil, nil, http.StatusOK).rev()
	eventually.True(t, 10*time.Second, "the restarted node to catch up", func() bool {
		return gr.groupOf(old).Revision() >= last
	})
	gr.checkKeys(old, acked, "?stale=true")

	// Whole-group restart: every node restores its snapshot and replays the
	// log after it; nothing is lost.
	for i := range gr.nodes {
		gr.kill(i)
	}
	for i := range gr.nodes {
		gr.start(i)
	}
	gr.waitRestored(leader)
	gr.waitRestored(f)
	gr.waitRestored(old)
	leader = gr.waitLeader()
	gr.checkKeys(leader, acked, "")
	gr.checkKeys(gr.follower(leader), acked, "")
	gr.writeKeys(60, 70, []int{0, 1, 2}, acked)
	gr.checkKeys(old, acked, "")
}
