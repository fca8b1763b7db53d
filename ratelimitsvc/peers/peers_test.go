package peers_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/ratelimitsvc/peers"
)

type replica struct {
	count  atomic.Int64
	renew  chan error
	cancel context.CancelFunc
	done   chan struct{}
}

func start(t *testing.T, c redis.UniversalClient, key, id string) *replica {
	r := &replica{renew: make(chan error, 64), done: make(chan struct{})}
	pc, err := peers.New(peers.Config{Client: c, Key: key, ID: id, Interval: 50 * time.Millisecond, TTL: 400 * time.Millisecond,
		Set: func(n int) { r.count.Store(int64(n)) },
		Renewed: func(_ int, err error) {
			select { // never block the counter on a test that stopped listening
			case r.renew <- err:
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { defer close(r.done); pc.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *replica) stop() {
	r.cancel()
	<-r.done
}

// renewed waits for n renewals that start after the call (ones already
// reported are dropped); the last one's error is returned.
func (r *replica) renewed(t *testing.T, n int) (last error) {
	t.Helper()
	for drained := false; !drained; {
		select {
		case <-r.renew:
		default:
			drained = true
		}
	}
	n++ // the renewal in progress may have begun before the call
	for range n {
		select {
		case last = <-r.renew:
		case <-time.After(10 * time.Second):
			t.Fatal("no renewal in 10s")
		}
	}
	return last
}

func TestCountFollowsLiveReplicas(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: testdeps.Redis(t)})
	t.Cleanup(func() { _ = c.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	key := "portico:test:peers:" + hex.EncodeToString(b[:])
	a := start(t, c, key, "a")
	b1 := start(t, c, key, "b")
	c1 := start(t, c, key, "c")
	for _, r := range []*replica{a, b1, c1} {
		r.renewed(t, 2) // every replica renewed after all three joined
	}
	a.renewed(t, 1)
	if n := a.count.Load(); n != 3 {
		t.Fatalf("count %d, want 3", n)
	}
	// A replica that stops cleanly leaves at once.
	c1.stop()
	a.renewed(t, 2)
	if n := a.count.Load(); n != 2 {
		t.Fatalf("after a clean stop: %d, want 2", n)
	}
	// A replica that dies without leaving (its entry is planted with a
	// short expiry) stops counting once the entry expires.
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	c.ZAdd(context.Background(), key, redis.Z{Score: float64(now.Add(time.Second).UnixMilli()), Member: "ghost"})
	a.renewed(t, 1)
	if n := a.count.Load(); n != 3 {
		t.Fatalf("with the ghost: %d, want 3", n)
	}
	for i := 0; a.count.Load() != 2; i++ {
		if i == 100 {
			t.Fatalf("the ghost is still counted after 100 renewals: %d", a.count.Load())
		}
		a.renewed(t, 1)
	}
}

// Redis gone: the last count stays (that is when degraded mode reads it).
func TestCountSurvivesOutage(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	r := &replica{}
	r.count.Store(4)
	pc, err := peers.New(peers.Config{Client: c, Key: "k", ID: "a", Interval: 20 * time.Millisecond, TTL: 100 * time.Millisecond,
		Set: func(n int) { r.count.Store(int64(n)) }, Renewed: func(_ int, err error) {
			if err == nil {
				t.Error("renewed against a closed port")
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	pc.Run(ctx)
	if n := r.count.Load(); n != 4 {
		t.Fatalf("count %d after failed renewals, want the last (4)", n)
	}
}
