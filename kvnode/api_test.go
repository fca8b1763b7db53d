package kvnode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestHTTPAPIContract(t *testing.T) {
	c := newCluster(t, 3, nil)

	// Put, get, delete.
	r := c.mustDo("PUT", "n0", "/v1/kv/user:1?consistency=ALL", []byte("hello"), nil, http.StatusOK)
	if got := r.header.Get("X-KV-Acks"); got != "3/3" {
		t.Fatalf("X-KV-Acks = %q, want 3/3", got)
	}
	if r := c.mustDo("GET", "n1", "/v1/kv/user:1?consistency=ONE", nil, nil, http.StatusOK); string(r.body) != "hello" {
		t.Fatalf("get = %q", r.body)
	}
	c.mustDo("DELETE", "n2", "/v1/kv/user:1", nil, nil, http.StatusNoContent)
	c.mustDo("GET", "n0", "/v1/kv/user:1?consistency=ALL", nil, nil, http.StatusNotFound)

	// Validation: clear 4xx naming the field, nothing written.
	for _, tc := range []struct {
		method, path string
		body         []byte
		hdr          map[string]string
		status       int
		field        string
	}{
		{"PUT", "/v1/kv/" + strings.Repeat("k", 257), []byte("v"), nil, 400, "key"},
		{"PUT", "/v1/kv/big", bytes.Repeat([]byte("x"), 1<<20+1), nil, 413, "value"},
		{"PUT", "/v1/kv/k?consistency=TWO", []byte("v"), nil, 400, "consistency"},
		{"PUT", "/v1/kv/k?ttl=-1", []byte("v"), nil, 400, "ttl"},
		{"PUT", "/v1/kv/k", []byte("v"), map[string]string{"X-KV-Context": "!!"}, 400, "X-KV-Context"},
		{"GET", "/v1/kv/k?consistency=most", nil, nil, 400, "consistency"},
	} {
		r := c.mustDo(tc.method, "n0", tc.path, tc.body, tc.hdr, tc.status)
		var e struct {
			Error struct{ Code, Message, Field string }
		}
		if err := json.Unmarshal(r.body, &e); err != nil || e.Error.Field != tc.field || e.Error.Code == "" {
			t.Fatalf("%s %.40s: error body %s, want field %q", tc.method, tc.path, r.body, tc.field)
		}
	}
	c.mustDo("GET", "n0", "/v1/kv/big?consistency=ALL", nil, nil, http.StatusNotFound)
	c.mustDo("PUT", "n0", "/v1/kv/max", bytes.Repeat([]byte("x"), 1<<20), nil, http.StatusOK)

	// Idempotency-Key: a retried put is answered from the first attempt.
	hdr := map[string]string{"Idempotency-Key": "op-1"}
	c.mustDo("PUT", "n0", "/v1/kv/idem?consistency=ALL", []byte("a"), hdr, http.StatusOK)
	recs, _ := c.node(c.replicas("n0", "idem")[0]).Store().Get([]byte("idem"))
	ts := recs[0].Timestamp
	r = c.mustDo("PUT", "n0", "/v1/kv/idem?consistency=ALL", []byte("a"), hdr, http.StatusOK)
	if r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("retry not de-duplicated")
	}
	recs, _ = c.node(c.replicas("n0", "idem")[0]).Store().Get([]byte("idem"))
	if recs[0].Timestamp != ts {
		t.Fatal("retry wrote a second version")
	}
	c.mustDo("PUT", "n0", "/v1/kv/idem?consistency=ALL", []byte("other"), hdr, http.StatusUnprocessableEntity)

	// TTL on data time.
	c.mustDo("PUT", "n0", "/v1/kv/ttl?ttl=60", []byte("short"), nil, http.StatusOK)
	c.mustDo("GET", "n1", "/v1/kv/ttl", nil, nil, http.StatusOK)
	c.clock.Advance(61 * time.Second)
	c.mustDo("GET", "n1", "/v1/kv/ttl", nil, nil, http.StatusNotFound)

	// Batch get.
	c.mustDo("PUT", "n0", "/v1/kv/b1", []byte("one"), nil, http.StatusOK)
	r = c.mustDo("POST", "n1", "/v1/kv:batchGet", []byte(`{"keys":["b1","b2"],"consistency":"QUORUM"}`), nil, http.StatusOK)
	var batch struct {
		Items []struct {
			Key      string
			Found    bool
			Siblings []struct{ Value []byte }
		}
	}
	if err := json.Unmarshal(r.body, &batch); err != nil || len(batch.Items) != 2 || !batch.Items[0].Found || string(batch.Items[0].Siblings[0].Value) != "one" || batch.Items[1].Found {
		t.Fatalf("batch = %s", r.body)
	}
	many := make([]string, 101)
	for i := range many {
		many[i] = fmt.Sprintf("%q", fmt.Sprint("k", i))
	}
	c.mustDo("POST", "n1", "/v1/kv:batchGet", []byte(`{"keys":[`+strings.Join(many, ",")+`]}`), nil, http.StatusRequestEntityTooLarge)

	// Token map and the reserved consensus prefix.
	r = c.mustDo("GET", "n2", "/v1/ring", nil, nil, http.StatusOK)
	var rv RingView
	if err := json.Unmarshal(r.body, &rv); err != nil || len(rv.Nodes) != 3 || len(rv.Ranges) != 48 {
		t.Fatalf("ring: %d nodes %d ranges (%v)", len(rv.Nodes), len(rv.Ranges), err)
	}
	sum := 0.0
	for _, n := range rv.Nodes {
		sum += n.Ownership
	}
	if math.Abs(sum-1) > 1e-6 {
		t.Fatalf("ownership sums to %f", sum)
	}
	c.mustDo("GET", "n0", "/v1/cp/lock", nil, nil, http.StatusNotImplemented)

	// 504: replicas alive but not answering; outcome unknown.
	c.node("n1").Pause(true)
	c.node("n2").Pause(true)
	r = c.mustDo("PUT", "n0", "/v1/kv/t504?consistency=QUORUM", []byte("v"), nil, http.StatusGatewayTimeout)
	if !strings.Contains(string(r.body), `"timeout"`) {
		t.Fatalf("504 body %s", r.body)
	}
	// 503: once they are known down, nothing is attempted.
	c.waitAlive("n1", false, "n0")
	c.waitAlive("n2", false, "n0")
	// The timed-out write's replicas get hints once their own calls time out.
	c.waitUntil("hints for the timed-out write", 10*time.Second, func() bool { return c.node("n0").Hints().PendingTotal() >= 2 })
	hints := c.node("n0").Hints().PendingTotal()
	r = c.mustDo("PUT", "n0", "/v1/kv/t503?consistency=QUORUM", []byte("v"), nil, http.StatusServiceUnavailable)
	if !strings.Contains(string(r.body), `"unavailable"`) {
		t.Fatalf("503 body %s", r.body)
	}
	if v, ok := c.localValue("n0", "t503"); ok || c.node("n0").Hints().PendingTotal() != hints {
		t.Fatalf("unavailable write left data behind: %q", v)
	}
	c.mustDo("GET", "n0", "/v1/kv/user:1?consistency=QUORUM", nil, nil, http.StatusServiceUnavailable)
	// ONE still works against the live replica.
	c.mustDo("PUT", "n0", "/v1/kv/one?consistency=ONE", []byte("v"), nil, http.StatusOK)
	c.node("n1").Pause(false)
	c.node("n2").Pause(false)

	// Metrics are exposed with bounded labels.
	body := string(c.mustDo("GET", "n0", "/metrics", nil, nil, http.StatusOK).body)
	for _, m := range []string{"portico_kvnode_request_duration_seconds_bucket{consistency=\"QUORUM\",op=\"put\"", "portico_kvnode_hints_pending", "portico_kvnode_ring_ownership_ratio", "portico_kvnode_read_repairs_total"} {
		if !strings.Contains(body, m) {
			t.Fatalf("metric %s missing", m)
		}
	}
	c.mustDo("GET", "n0", "/readyz", nil, nil, http.StatusOK)
}

// A replica that stops answering (but is not yet judged down) costs a read
// the speculative-retry threshold, not the read timeout.
func TestSpeculativeRetryAroundAStalledReplica(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.PhiThreshold = 1e9 })
	for i := range 20 {
		c.mustDo("PUT", "n0", fmt.Sprintf("/v1/kv/spec:%d?consistency=ALL", i), []byte("v"), nil, http.StatusOK)
	}
	c.node("n2").Pause(true)
	defer c.node("n2").Pause(false)
	start := time.Now()
	for i := range 20 {
		c.mustDo("GET", "n0", fmt.Sprintf("/v1/kv/spec:%d?consistency=QUORUM", i), nil, nil, http.StatusOK)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("20 reads took %s", d)
	}
	if c.node("n0").Coordinator().SpeculativeRuns.Load() == 0 {
		t.Fatal("no speculative retry although a replica never answered")
	}
}
