package nodes

import (
	"testing"
	"time"
)

func TestTrackerStreamsAckNack(t *testing.T) {
	tr := NewTracker()
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	tr.timeNow = func() time.Time { return now }
	var seen []string
	tr.Observe(func(node, typeURL, version string, nack bool) {
		kind := "ack"
		if nack {
			kind = "nack"
		}
		seen = append(seen, node+" "+kind+" "+version)
	})

	tr.Connect("n1", "portico-gateway", "", "", false)
	tr.Connect("n1", "portico-gateway", "canary", "spiffe://portico.local/gateway/n1", false) // a second stream re-identifies
	const cds = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	tr.Sent("n1", cds, "3")
	tr.Ack("n1", cds, "3")
	tr.Sent("n1", cds, "4")
	tr.Nack("n1", cds, "4", "bad cluster")
	tr.Ack("ghost", cds, "1") // unknown nodes are ignored

	st, ok := tr.Get("n1")
	if !ok || st.Streams != 2 || st.Group != "canary" || !st.ConnectedAt.Equal(now) {
		t.Fatalf("status %+v", st)
	}
	ts := st.Types[cds]
	if ts.AckedVersion != "3" || ts.SentVersion != "" || ts.Nack == nil || ts.Nack.Version != "4" || ts.Nack.Error != "bad cluster" {
		t.Fatalf("type status %+v nack %+v", ts, ts.Nack)
	}
	if v, ok := tr.NackedVersion("n1", cds); !ok || v != "4" {
		t.Fatalf("NackedVersion = %q %v", v, ok)
	}
	if len(seen) != 2 || seen[0] != "n1 ack 3" || seen[1] != "n1 nack 4" {
		t.Fatalf("observer saw %v", seen)
	}
	// Get returns a copy: changing it does not change the tracker.
	st.Types[cds].AckedVersion = "x"
	if again, _ := tr.Get("n1"); again.Types[cds].AckedVersion != "3" {
		t.Fatal("Get leaked internal state")
	}

	tr.Disconnect("n1")
	if _, ok := tr.Get("n1"); !ok {
		t.Fatal("node gone while a stream remains")
	}
	tr.Disconnect("n1")
	if _, ok := tr.Get("n1"); ok || len(tr.List()) != 0 {
		t.Fatal("node listed after its last stream closed")
	}
	if st, _ := tr.Get("n2"); st.Group != "" {
		t.Fatal("unknown node has a status")
	}
	tr.Connect("n2", "c", "", "", false)
	if st, _ := tr.Get("n2"); st.Group != DefaultGroup {
		t.Fatalf("default group %q", st.Group)
	}
}
