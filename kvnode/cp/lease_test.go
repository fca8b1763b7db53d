package cp_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/eventually"
)

func TestLeaseKeepAliveAndExpiry(t *testing.T) {
	gr := newGroup(t, 3)
	leader := gr.waitLeader()
	f := gr.follower(leader)

	// Granted through a follower (forwarded).
	r := gr.must("POST", f, "/v1/cp/leases", []byte(`{"ttlSeconds":1}`), nil, http.StatusCreated)
	var grant struct {
		ID uint64 `json:"id"`
	}
	if err := json.Unmarshal(r.body, &grant); err != nil || grant.ID == 0 {
		t.Fatalf("grant %s: %v", r.body, err)
	}
	lease := fmt.Sprint(grant.ID)
	gr.must("PUT", f, "/v1/cp/locks/a?lease="+lease, []byte("held"), nil, http.StatusOK)
	gr.must("PUT", leader, "/v1/cp/locks/b?lease="+lease, []byte("held"), nil, http.StatusOK)
	gr.must("PUT", leader, "/v1/cp/locks/free", []byte("x"), nil, http.StatusOK)
	r = gr.must("PUT", leader, "/v1/cp/locks/c?lease=999999", []byte("x"), nil, http.StatusNotFound)
	if code, field := errCode(t, r); code != "lease_not_found" || field != "lease" {
		t.Fatalf("unknown lease: %s %s", code, field)
	}

	// Kept alive (through the follower) for well past its TTL: the keys stay.
	until := time.Now().Add(2500 * time.Millisecond)
	tick := time.NewTicker(250 * time.Millisecond)
	for time.Now().Before(until) {
		gr.must("POST", f, "/v1/cp/leases/"+lease+"/keepalive", nil, nil, http.StatusOK)
		gr.must("GET", leader, "/v1/cp/locks/a", nil, nil, http.StatusOK)
		<-tick.C
	}
	tick.Stop()

	// No more keepalives: the lease expires and takes its keys, not others.
	eventually.True(t, 10*time.Second, "the lease's keys to vanish", func() bool {
		a, _ := do(t.Context(), gr.client, "GET", gr.nodes[leader].httpAddr, "/v1/cp/locks/a", nil, nil)
		b, _ := do(t.Context(), gr.client, "GET", gr.nodes[leader].httpAddr, "/v1/cp/locks/b", nil, nil)
		return a.status == http.StatusNotFound && b.status == http.StatusNotFound
	})
	gr.must("GET", f, "/v1/cp/locks/free", nil, nil, http.StatusOK)
	gr.must("POST", f, "/v1/cp/leases/"+lease+"/keepalive", nil, nil, http.StatusNotFound)

	// Explicit revoke.
	r = gr.must("POST", leader, "/v1/cp/leases", []byte(`{"ttlSeconds":60}`), nil, http.StatusCreated)
	if err := json.Unmarshal(r.body, &grant); err != nil {
		t.Fatal(err)
	}
	lease = fmt.Sprint(grant.ID)
	gr.must("PUT", leader, "/v1/cp/locks/d?lease="+lease, []byte("x"), nil, http.StatusOK)
	gr.must("DELETE", f, "/v1/cp/leases/"+lease, nil, nil, http.StatusOK)
	gr.must("GET", leader, "/v1/cp/locks/d", nil, nil, http.StatusNotFound)

	for path, field := range map[string]string{
		"/v1/cp/leases":             "ttlSeconds", // ttl 0
		"/v1/cp/leases/x/keepalive": "lease",
	} {
		r := gr.must("POST", f, path, []byte(`{"ttlSeconds":0}`), nil, http.StatusBadRequest)
		if _, got := errCode(t, r); got != field {
			t.Errorf("%s: field %q, want %q", path, got, field)
		}
	}
	r = gr.must("GET", f, "/v1/cp/locks/a?lease=1", nil, nil, http.StatusBadRequest)
	if _, got := errCode(t, r); got != "lease" {
		t.Errorf("lease on GET: field %q", got)
	}
}
