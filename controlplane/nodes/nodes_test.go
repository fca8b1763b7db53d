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

func TestTrackerStreamFailures(t *testing.T) {
	tr := NewTracker()
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	tr.timeNow = func() time.Time { return now }
	const keys = "type.googleapis.com/portico.auth.v1.ApiKeyShard"

	// One failure (a client restarting mid-response) is shown, not failing.
	tr.Connect("ea", "portico-extauthz", "", "", true)
	tr.Sent("ea", keys, "7")
	tr.StreamFailed("ea", []string{keys}, "stream closed before the node answered ApiKeyShard version 7")
	tr.Disconnect("ea")
	if _, ok := tr.Get("ea"); ok {
		t.Fatal("a node gone after one failure is still listed")
	}
	// It reconnects and fails again: failing, and listed between reconnects.
	tr.Connect("ea", "portico-extauthz", "", "", true)
	if st, _ := tr.Get("ea"); st.State != StateOK || st.LastStreamError == nil || st.LastStreamError.Count != 1 {
		t.Fatalf("connected after one failure: %+v", st)
	}
	now = now.Add(time.Second)
	tr.StreamFailed("ea", []string{keys}, "stream closed before the node answered ApiKeyShard version 7 (2 bytes)")
	tr.Disconnect("ea")
	list := tr.List()
	if len(list) != 1 || list[0].ID != "ea" || list[0].State != StateFailing || list[0].Streams != 0 ||
		list[0].LastStreamError.Count != 2 || !list[0].LastStreamError.At.Equal(now) {
		t.Fatalf("failing node between reconnects: %+v", list)
	}
	// Still failing while connected, whatever other type it ACKs; an ACK
	// of the type that failed clears it.
	tr.Connect("ea", "portico-extauthz", "", "", true)
	tr.Ack("ea", "type.googleapis.com/portico.auth.v1.RevocationList", "8")
	if st, _ := tr.Get("ea"); st.State != StateFailing || st.Streams != 1 {
		t.Fatalf("failing node reconnected: %+v", st)
	}
	tr.Ack("ea", keys, "8")
	if st, _ := tr.Get("ea"); st.State != StateOK || st.LastStreamError != nil {
		t.Fatalf("after an ACK: %+v", st)
	}

	// A failing node that never comes back is forgotten after the retention.
	tr.Connect("gw", "portico-gateway", "", "", false)
	for range FailingAfter {
		tr.StreamFailed("gw", []string{keys}, "x")
	}
	tr.Disconnect("gw")
	if st, ok := tr.Get("gw"); !ok || st.State != StateFailing {
		t.Fatalf("gone failing node: %+v %v", st, ok)
	}
	now = now.Add(DefaultFailureRetention + time.Second)
	if _, ok := tr.Get("gw"); ok || len(tr.List()) != 1 {
		t.Fatalf("failing node kept past the retention: %+v", tr.List())
	}
}

func TestTrackerAckUnchanged(t *testing.T) {
	tr := NewTracker()
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	tr.timeNow = func() time.Time { return now }
	acks := 0
	tr.Observe(func(string, string, string, bool) { acks++ })
	const keys = "type.googleapis.com/portico.auth.v1.ApiKeyShard"
	const jwt = "type.googleapis.com/portico.auth.v1.JwtProvider"

	if tr.AckUnchanged("ghost", keys, "1") {
		t.Fatal("recorded for an unknown node")
	}
	tr.Connect("ea", "portico-extauthz", "", "", true)
	if tr.AckUnchanged("ea", keys, "1") {
		t.Fatal("recorded for a type never sent")
	}
	tr.Sent("ea", keys, "1")
	tr.Ack("ea", keys, "1")
	if tr.AckUnchanged("ea", keys, "1") {
		t.Fatal("recorded again at the version ACKed")
	}
	now = now.Add(time.Second)
	if !tr.AckUnchanged("ea", keys, "2") {
		t.Fatal("not recorded at a new version")
	}
	st, _ := tr.Get("ea")
	if ts := st.Types[keys]; ts.AckedVersion != "2" || !ts.Unchanged || !ts.AckedAt.Equal(now) {
		t.Fatalf("after AckUnchanged: %+v", ts)
	}
	if _, ok := st.Types[jwt]; ok {
		t.Fatal("a type the node was never sent is listed")
	}
	// A NACK stays; a real ACK clears Unchanged; observers saw ACKs only.
	tr.Sent("ea", keys, "3")
	tr.Nack("ea", keys, "3", "bad shard")
	tr.AckUnchanged("ea", keys, "4")
	st, _ = tr.Get("ea")
	if ts := st.Types[keys]; ts.AckedVersion != "4" || ts.Nack == nil || ts.Nack.Version != "3" {
		t.Fatalf("unchanged after a NACK: %+v", ts)
	}
	tr.Sent("ea", keys, "5")
	tr.Ack("ea", keys, "5")
	st, _ = tr.Get("ea")
	if ts := st.Types[keys]; ts.AckedVersion != "5" || ts.Unchanged || ts.SentVersion != "" {
		t.Fatalf("after a real ACK: %+v", ts)
	}
	if acks != 3 {
		t.Fatalf("observers told %d times, want 3 (2 ACKs, 1 NACK)", acks)
	}
}
