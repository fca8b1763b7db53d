package cp_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func TestTxnThroughFollower(t *testing.T) {
	gr := newGroup(t, 3)
	leader := gr.waitLeader()
	f := gr.follower(leader)
	ra := gr.must("PUT", leader, "/v1/cp/acct/a", []byte("10"), nil, http.StatusOK).rev()
	rb := gr.must("PUT", leader, "/v1/cp/acct/b", []byte("5"), nil, http.StatusOK).rev()
	txn := func(ra, rb uint64) string {
		return fmt.Sprintf(`{"compare":[{"keyspace":"acct","key":"a","revision":%d},{"keyspace":"acct","key":"b","revision":%d}],
			"ops":[{"op":"put","keyspace":"acct","key":"a","value":"Nw=="},{"op":"put","keyspace":"acct","key":"b","value":"OA=="},
			{"op":"delete","keyspace":"acct","key":"gone"}]}`, ra, rb)
	}
	// Stale revision on b: 412 naming the failed compare, nothing written.
	r := gr.must("POST", f, "/v1/cp:txn", []byte(txn(ra, rb-1)), nil, http.StatusPreconditionFailed)
	var conflict struct {
		Failed  []int    `json:"failed"`
		Current []uint64 `json:"current"`
	}
	if err := json.Unmarshal(r.body, &conflict); err != nil || fmt.Sprint(conflict.Failed) != "[1]" || fmt.Sprint(conflict.Current) != fmt.Sprint([]uint64{ra, rb}) {
		t.Fatalf("conflict body %s: %v", r.body, err)
	}
	if _, field := errCode(t, r); field != "compare[1]" {
		t.Fatalf("field %q", field)
	}
	if got := gr.must("GET", leader, "/v1/cp/acct/a", nil, nil, http.StatusOK); string(got.body) != "10" {
		t.Fatalf("failed txn wrote a=%q", got.body)
	}
	// Forwarded by the follower, applied atomically at one revision.
	r = gr.must("POST", f, "/v1/cp:txn", []byte(txn(ra, rb)), nil, http.StatusOK)
	rev := r.rev()
	for k, v := range map[string]string{"a": "7", "b": "8"} {
		got := gr.must("GET", f, "/v1/cp/acct/"+k, nil, nil, http.StatusOK)
		if string(got.body) != v || got.rev() != rev {
			t.Fatalf("%s = %q at %d, want %q at %d", k, got.body, got.rev(), v, rev)
		}
	}
	// Replaying the same transaction fails: the revisions moved.
	gr.must("POST", leader, "/v1/cp:txn", []byte(txn(ra, rb)), nil, http.StatusPreconditionFailed)

	for body, field := range map[string]string{
		`{"ops":[]}`: "ops",
		`{"ops":[{"op":"incr","keyspace":"acct","key":"a"}]}`:                                          "ops[0].op",
		`{"ops":[{"op":"put","keyspace":"a b","key":"a"}]}`:                                            "ops[0].keyspace",
		`{"compare":[{"keyspace":"acct","key":"a"}],"ops":[{"op":"put","keyspace":"acct","key":"a"}]}`: "compare[0]",
		`{"ops":[{"op":"delete","keyspace":"acct","key":"a","value":"eA=="}]}`:                         "ops[0].value",
		`{"ops":[{"op":"put","keyspace":"acct","key":"` + strings.Repeat("k", 300) + `"}]}`:            "ops[0].key",
		`{"opz":1}`: "body",
	} {
		r := gr.must("POST", f, "/v1/cp:txn", []byte(body), nil, http.StatusBadRequest)
		if _, got := errCode(t, r); got != field {
			t.Errorf("%s: field %q, want %q", body, got, field)
		}
	}
}
