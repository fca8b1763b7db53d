package hlc

import (
	"errors"
	"math"
	"testing"
	"time"
)

func fixed(t time.Time) func() time.Time { return func() time.Time { return t } }

func TestNowIsMonotonicAndAboveObserved(t *testing.T) {
	wall := time.UnixMilli(1_700_000_000_000)
	c := New(fixed(wall), 0)
	a, b := c.Now(), c.Now()
	if b <= a || WallMillis(a) != wall.UnixMilli() {
		t.Fatalf("Now: %d then %d", a, b)
	}
	peer := FromWall(wall.Add(200*time.Millisecond)) + 7 // within the offset
	if err := c.Observe(peer); err != nil {
		t.Fatal(err)
	}
	if n := c.Now(); n <= peer {
		t.Fatalf("Now %d not above the observed %d", n, peer)
	}
}

// A remote timestamp further ahead than the maximum offset is refused and
// counted, and does not move the clock: one record stamped near
// MaxUint64 used to wrap Now to 0, losing every later last-write-wins.
func TestObserveRefusesTimestampsBeyondMaxOffset(t *testing.T) {
	wall := time.UnixMilli(1_700_000_000_000)
	c := New(fixed(wall), 500*time.Millisecond)
	before := c.Now()
	for _, ts := range []uint64{math.MaxUint64, math.MaxUint64 - 1, FromWall(wall.Add(time.Second)), FromWall(wall.Add(501 * time.Millisecond))} {
		if err := c.Observe(ts); !errors.Is(err, ErrOffset) {
			t.Errorf("Observe(%d): %v, want ErrOffset", ts, err)
		}
	}
	if got := c.Rejected(); got != 4 {
		t.Errorf("Rejected = %d, want 4", got)
	}
	after := c.Now()
	if after <= before || WallMillis(after) != wall.UnixMilli() {
		t.Fatalf("the clock moved to %d (wall %d) after refused timestamps; before %d", after, WallMillis(after), before)
	}
	if err := c.Observe(FromWall(wall.Add(500 * time.Millisecond))); err != nil {
		t.Fatalf("at exactly the offset: %v", err)
	}
}

// Now never wraps: at the top of the range it stays there.
func TestNowDoesNotOverflow(t *testing.T) {
	c := New(fixed(time.UnixMilli(1_700_000_000_000)), 0)
	c.last = math.MaxUint64 - 1
	if a, b := c.Now(), c.Now(); a != math.MaxUint64 || b != math.MaxUint64 {
		t.Fatalf("Now at the top: %d, %d", a, b)
	}
	// A wall clock before 1970 is not a huge unsigned number.
	c = New(fixed(time.UnixMilli(-5)), 0)
	if got := c.Now(); got > 1 {
		t.Fatalf("Now before the epoch: %d", got)
	}
}
