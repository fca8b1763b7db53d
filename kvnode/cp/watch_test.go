package cp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/portico-io/portico/kvnode/cp"
)

type watchStream struct {
	cancel context.CancelFunc
	resp   *http.Response
	sc     *bufio.Scanner
}

func (gr *group) openWatch(node int, query string) (*watchStream, int) {
	gr.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+gr.nodes[node].httpAddr+"/v1/cp/w?watch=true&"+query, nil)
	if err != nil {
		gr.t.Fatal(err)
	}
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		cancel()
		gr.t.Fatal(err)
	}
	// Closed at the latest when the test ends, also when it fails before
	// the caller's close (closing twice is harmless).
	gr.t.Cleanup(func() {
		cancel()
		_ = resp.Body.Close()
	})
	return &watchStream{cancel: cancel, resp: resp, sc: bufio.NewScanner(resp.Body)}, resp.StatusCode
}

// next reads n events (the request's 20 s deadline bounds it).
func (ws *watchStream) next(t *testing.T, n int) []cp.Event {
	t.Helper()
	var out []cp.Event
	for len(out) < n {
		if !ws.sc.Scan() {
			t.Fatalf("watch ended after %d of %d events: %v", len(out), n, ws.sc.Err())
		}
		var e cp.Event
		if err := json.Unmarshal(ws.sc.Bytes(), &e); err != nil || e.Revision == 0 {
			t.Fatalf("event line %q: %v", ws.sc.Bytes(), err)
		}
		out = append(out, e)
	}
	return out
}

func (ws *watchStream) close() {
	ws.cancel()
	_ = ws.resp.Body.Close()
}

func describe(evs []cp.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprintf("%d %s %s=%s", e.Revision, e.Type, e.Key, e.Value))
	}
	return out
}

func TestWatchResumesExactlyOnce(t *testing.T) {
	gr := newGroup(t, 3)
	leader := gr.waitLeader()
	f := gr.follower(leader)

	// A live watch on a follower, opened before the writes.
	live, status := gr.openWatch(f, "prefix=k")
	defer live.close()
	if status != http.StatusOK {
		t.Fatalf("watch status %d", status)
	}
	var want []string
	put := func(key, v string) {
		r := gr.must("PUT", leader, "/v1/cp/w/"+key, []byte(v), nil, http.StatusOK)
		if key[0] == 'k' {
			want = append(want, fmt.Sprintf("%d put %s=%s", r.rev(), key, v))
		}
	}
	first := uint64(0)
	for i := range 6 {
		put(fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i))
		if first == 0 {
			first = gr.must("GET", leader, "/v1/cp/w/k0", nil, nil, http.StatusOK).rev()
		}
	}
	put("other", "x")                                                       // outside the prefix
	gr.must("PUT", leader, "/v1/cp/w2/k0", []byte("x"), nil, http.StatusOK) // another keyspace
	r := gr.must("DELETE", leader, "/v1/cp/w/k1", nil, nil, http.StatusOK)
	want = append(want, fmt.Sprintf("%d delete k1=", r.rev()))
	r = gr.must("POST", leader, "/v1/cp:txn", []byte(`{"ops":[{"op":"put","keyspace":"w","key":"k8","value":"dHg="},{"op":"delete","keyspace":"w","key":"k2"}]}`), nil, http.StatusOK)
	want = append(want, fmt.Sprintf("%d put k8=tx", r.rev()), fmt.Sprintf("%d delete k2=", r.rev()))

	if got := describe(live.next(t, len(want))); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("live watch:\n got %q\nwant %q", got, want)
	}

	// From a revision: read part, disconnect, resume from the last
	// revision received + 1; together exactly the history, once.
	ws, _ := gr.openWatch(f, fmt.Sprintf("prefix=k&fromRevision=%d", first))
	part := ws.next(t, 4)
	ws.close()
	ws, _ = gr.openWatch(leader, fmt.Sprintf("prefix=k&fromRevision=%d", part[len(part)-1].Revision+1))
	defer ws.close()
	rest := ws.next(t, len(want)-len(part))
	if got := describe(append(part, rest...)); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("resumed watch:\n got %q\nwant %q", got, want)
	}

	// History before a snapshot restore is compacted: 410 naming the field.
	if err := gr.groupOf(f).Snapshot(); err != nil {
		t.Fatal(err)
	}
	gr.kill(f)
	gr.start(f)
	gr.waitRestored(f)
	ws, status = gr.openWatch(f, "fromRevision=1")
	defer ws.close()
	if status != http.StatusGone {
		t.Fatalf("compacted watch: status %d", status)
	}
	gr.must("GET", f, "/v1/cp/w?watch=true&fromRevision=0", nil, nil, http.StatusBadRequest)
	gr.must("GET", f, "/v1/cp/w", nil, nil, http.StatusBadRequest)
	var ce *cp.CompactedError
	err := gr.groupOf(f).Watch(t.Context(), "w", "", 1, func([]cp.Event) error { return nil })
	if !errors.As(err, &ce) || ce.FirstRevision <= 1 {
		t.Fatalf("watch from 1 after restore: %v", err)
	}
}
