package hint

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/kvnode/storage"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

type sink struct {
	mu    sync.Mutex
	got   map[string]int
	calls int
	fail  error
}

func (s *sink) SendHints(_ context.Context, target string, es []*kvv1.Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.fail != nil {
		return s.fail
	}
	if s.got == nil {
		s.got = map[string]int{}
	}
	s.got[target] += len(es)
	return nil
}

type alive map[string]bool

func (a alive) Alive(id string) bool { return a[id] }
func (a alive) Left(id string) bool  { return id == "gone" }

func open(t *testing.T) *storage.Store {
	t.Helper()
	st, err := storage.Open(t.TempDir(), storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func entry(i int) *kvv1.Entry {
	return &kvv1.Entry{Key: fmt.Appendf(nil, "k%d", i), Siblings: &kvv1.Siblings{Records: []*kvv1.Record{{Timestamp: uint64(i + 1), Value: []byte("v")}}}}
}

func TestReplayIsThrottledDurableAndExpires(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { return now }
	st := open(t)
	h, err := New(st, Config{Window: time.Hour, Batch: 10, PerPass: 25, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		if err := h.Add("b", entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	// Durable: a new Hints over the same store sees them.
	h2, err := New(st, Config{Window: time.Hour, Batch: 10, PerPass: 25, Now: clock})
	if err != nil || h2.PendingTotal() != 60 {
		t.Fatalf("reloaded pending = %d (%v)", h2.PendingTotal(), err)
	}
	s := &sink{}
	// Down target: nothing sent.
	if err := h.ReplayOnce(t.Context(), s, alive{}); err != nil || s.calls != 0 {
		t.Fatalf("replayed to a down node: %d calls, %v", s.calls, err)
	}
	// A failing target keeps its hints.
	s.fail = errors.New("boom")
	if err := h.ReplayOnce(t.Context(), s, alive{"b": true}); err == nil || h.PendingTotal() != 60 {
		t.Fatalf("failed delivery dropped hints: pending %d, err %v", h.PendingTotal(), err)
	}
	s.fail = nil
	// Throttled: at most PerPass (rounded up to whole batches) per pass.
	if err := h.ReplayOnce(t.Context(), s, alive{"b": true}); err != nil {
		t.Fatal(err)
	}
	if s.got["b"] != 30 || h.PendingTotal() != 30 {
		t.Fatalf("one pass sent %d, pending %d; want 30 and 30", s.got["b"], h.PendingTotal())
	}
	// Expiry: past the window the rest is dropped, not sent.
	now = now.Add(2 * time.Hour)
	if err := h.ReplayOnce(t.Context(), s, alive{"b": true}); err != nil {
		t.Fatal(err)
	}
	if s.got["b"] != 30 || h.PendingTotal() != 0 || h.Expired.Load() != 30 {
		t.Fatalf("after expiry: sent %d, pending %d, expired %d", s.got["b"], h.PendingTotal(), h.Expired.Load())
	}
}

// A replay pass deletes the hints of a target that left the ring, and no
// other's.
func TestDropForgetsOneTarget(t *testing.T) {
	st := open(t)
	h, err := New(st, Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		for _, target := range []string{"gone", "kept"} {
			if err := h.Add(target, entry(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A replay pass drops the hints of a target that left.
	if err := h.ReplayOnce(t.Context(), &sink{}, alive{}); err != nil {
		t.Fatal(err)
	}
	if p := h.Pending(); p["gone"] != 0 || p["kept"] != 5 {
		t.Fatalf("pending after drop: %v", p)
	}
	// Durable: a reopened hint set sees the same.
	h2, err := New(st, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if p := h2.Pending(); p["gone"] != 0 || p["kept"] != 5 {
		t.Fatalf("pending after reopen: %v", p)
	}
}
