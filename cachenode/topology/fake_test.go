package topology_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode/topology"
)

// fakeKV is the part of kvnode's /v1/cp/ API the client uses, with fault
// switches kvnode cannot be made to produce on demand.
type fakeKV struct {
	mu    sync.Mutex
	value []byte
	rev   uint64
	// lostAnswers: the next n PUTs are applied but answered 504.
	lostAnswers int
	// gone: watches with fromRevision below it answer 410.
	gone uint64
	puts int
}

func (f *fakeKV) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.URL.Query().Get("watch") == "true" {
		from, _ := strconv.ParseUint(r.URL.Query().Get("fromRevision"), 10, 64)
		if from < f.gone {
			w.WriteHeader(http.StatusGone)
			_ = json.NewEncoder(w).Encode(map[string]any{"firstRevision": f.gone})
			return
		}
		w.WriteHeader(http.StatusOK) // then nothing: the stream ends
		return
	}
	setRev := func(r uint64) {
		w.Header().Set("ETag", strconv.Quote(strconv.FormatUint(r, 10)))
		w.Header().Set("X-KV-Revision", strconv.FormatUint(r, 10))
	}
	switch r.Method {
	case http.MethodGet:
		setRev(f.rev)
		if f.value == nil {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		_, _ = w.Write(f.value)
	case http.MethodPut:
		f.puts++
		want, _ := strconv.ParseUint(strings.Trim(r.Header.Get("If-Match"), `"`), 10, 64)
		if want != f.rev {
			setRev(f.rev)
			w.WriteHeader(http.StatusPreconditionFailed)
			return
		}
		f.value, _ = io.ReadAll(r.Body)
		f.rev += 10
		if f.lostAnswers > 0 {
			f.lostAnswers--
			w.WriteHeader(http.StatusGatewayTimeout)
			return
		}
		setRev(f.rev)
		_ = json.NewEncoder(w).Encode(map[string]any{"revision": f.rev})
	}
}

func TestClientLeaderHintAndUnknownOutcome(t *testing.T) {
	kv := &fakeKV{}
	leader := httptest.NewServer(kv)
	defer leader.Close()
	// A follower without a leader to forward to: 503 naming the leader.
	follower := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-KV-Leader-Http-Addr", strings.TrimPrefix(leader.URL, "http://"))
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer follower.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := &topology.Client{Addrs: []string{follower.URL}, Cluster: "x"}
	if _, err := c.Load(ctx); !errors.Is(err, topology.ErrNotFound) {
		t.Fatalf("Load through the leader hint: %v", err)
	}
	// The write is applied but its answer lost: the retry's conflict finds
	// our document, which is success.
	kv.mu.Lock()
	kv.lostAnswers = 1
	kv.mu.Unlock()
	rev, err := c.Publish(ctx, spec(1, "0-16383"), 0)
	kv.mu.Lock()
	puts := kv.puts
	kv.mu.Unlock()
	if err != nil || rev != 10 || puts != 2 {
		t.Fatalf("Publish after a lost answer = %d, %v (%d PUTs)", rev, err, puts)
	}
	// Only a follower that knows no leader: unavailable.
	lone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	defer lone.Close()
	c2 := &topology.Client{Addrs: []string{lone.URL, "127.0.0.1:1"}, Cluster: "x"}
	if _, err := c2.Load(ctx); !errors.Is(err, topology.ErrUnavailable) {
		t.Fatalf("no leader anywhere: %v", err)
	}
}

func TestWatchAfterCompaction(t *testing.T) {
	kv := &fakeKV{}
	srv := httptest.NewServer(kv)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := &topology.Client{Addrs: []string{srv.URL}, Cluster: "x"}
	r1, err := c.Publish(ctx, spec(1, "0-16383"), 0)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.Publish(ctx, spec(2, "0-16383"), r1)
	if err != nil {
		t.Fatal(err)
	}
	kv.mu.Lock()
	kv.gone = r2 + 5 // the history starts after the stored revision
	kv.mu.Unlock()
	wctx, wcancel := context.WithCancel(ctx)
	got := make(chan topology.Update, 4)
	done := make(chan error, 1)
	go func() {
		done <- c.Watch(wctx, r1+1, func(u topology.Update) error { got <- u; return nil }, topology.WatchHooks{})
	}()
	select {
	case u := <-got:
		if u.Revision != r2 || u.Spec.Epoch != 2 {
			t.Fatalf("after 410: %+v", u)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no update after 410")
	}
	select {
	case u := <-got:
		t.Fatalf("seen twice: %+v", u)
	case <-time.After(500 * time.Millisecond):
	}
	wcancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
