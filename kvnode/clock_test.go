package kvnode

import (
	"context"
	"math"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// TestFarFutureTimestampIsRefused: a record stamped beyond the maximum
// clock offset (here near MaxUint64, which used to wrap the receiver's HLC
// to zero) is refused by the replica it is sent to and counted, and later
// writes of the key still win last-write-wins.
func TestFarFutureTimestampIsRefused(t *testing.T) {
	c := newCluster(t, 3, nil)
	key := "clock:k"
	c.mustDo("PUT", "n0", "/v1/kv/"+key+"?consistency=ALL", []byte("old"), nil, http.StatusOK)
	for _, ts := range []uint64{math.MaxUint64, uint64(time.Now().Add(time.Hour).UnixMilli()) << 16} {
		bad := []*kvv1.Entry{{Key: []byte(key), Siblings: &kvv1.Siblings{Records: []*kvv1.Record{{Timestamp: ts, Value: []byte("evil")}}}}}
		err := c.node("n0").Apply(context.Background(), "n1", bad)
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("apply of a record at %d: %v, want FailedPrecondition", ts, err)
		}
	}
	if got := c.node("n1").clock.Rejected(); got != 2 {
		t.Fatalf("n1 refused %d timestamps, want 2", got)
	}
	if v, _ := c.localValue("n1", key); v != "old" {
		t.Fatalf("n1 stored %q", v)
	}
	c.mustDo("PUT", "n1", "/v1/kv/"+key+"?consistency=ALL", []byte("new"), nil, http.StatusOK)
	if r := c.mustDo("GET", "n2", "/v1/kv/"+key+"?consistency=ALL", nil, nil, http.StatusOK); string(r.body) != "new" {
		t.Fatalf("read after the refused records: %q, want new", r.body)
	}
}
