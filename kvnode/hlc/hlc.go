// Package hlc is a hybrid logical clock: timestamps that follow wall time
// but never go backwards on one node and always exceed every timestamp the
// node has seen from its peers, so last-write-wins orders causally related
// writes correctly even under modest clock skew.
//
// Modest is enforced: a peer's timestamp more than the maximum offset
// ahead of this node's wall clock is refused (ErrOffset) rather than
// folded in, as CockroachDB bounds its HLC by --max-offset. Otherwise one
// record stamped far in the future (a broken clock, a bug, a hostile
// peer) would drag every later timestamp of the cluster with it, and one
// near the top of the range would wrap Now to zero and make every later
// write lose.
package hlc

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Timestamp layout: wall milliseconds in the high 48 bits, a logical counter
// in the low 16.
const logicalBits = 16

// DefaultMaxOffset is the default bound on how far ahead of local wall
// time a peer's timestamp may be (CockroachDB's default max-offset).
const DefaultMaxOffset = 500 * time.Millisecond

// ErrOffset is a peer timestamp beyond the maximum clock offset.
var ErrOffset = errors.New("hlc: timestamp beyond the maximum clock offset")

// Clock is safe for concurrent use.
type Clock struct {
	mu        sync.Mutex
	last      uint64
	now       func() time.Time
	maxOffset time.Duration
	rejected  atomic.Uint64
}

// New returns a clock reading wall time from now (time.Now when nil) that
// refuses peer timestamps more than maxOffset ahead of it
// (DefaultMaxOffset when zero or negative).
func New(now func() time.Time, maxOffset time.Duration) *Clock {
	if now == nil {
		now = time.Now
	}
	if maxOffset <= 0 {
		maxOffset = DefaultMaxOffset
	}
	return &Clock{now: now, maxOffset: maxOffset}
}

// FromWall is the smallest timestamp at wall time t (0 before the epoch;
// saturating after the year 10889).
func FromWall(t time.Time) uint64 {
	ms := t.UnixMilli()
	switch {
	case ms <= 0:
		return 0
	case uint64(ms) > math.MaxUint64>>logicalBits:
		return math.MaxUint64 &^ (1<<logicalBits - 1)
	}
	return uint64(ms) << logicalBits
}

// Now returns a timestamp greater than every one returned or observed
// before; at the very top of the range (unreachable through Observe) it
// stays there rather than wrap.
func (c *Clock) Now() uint64 {
	wall := FromWall(c.now())
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case wall > c.last:
		c.last = wall
	case c.last < math.MaxUint64:
		c.last++
	}
	return c.last
}

// Observe folds a peer's timestamp in, so later Now values exceed it. A
// timestamp more than the maximum offset ahead of local wall time is
// refused (ErrOffset, counted by Rejected) and changes nothing: the caller
// must not store what carried it.
func (c *Clock) Observe(ts uint64) error {
	wall := c.now()
	if limit := FromWall(wall.Add(c.maxOffset)) | (1<<logicalBits - 1); ts > limit {
		c.rejected.Add(1)
		return fmt.Errorf("%w: %d ms ahead of this node's clock (max %s)", ErrOffset, WallMillis(ts)-wall.UnixMilli(), c.maxOffset)
	}
	c.mu.Lock()
	if ts > c.last {
		c.last = ts
	}
	c.mu.Unlock()
	return nil
}

// Rejected counts the timestamps Observe refused.
func (c *Clock) Rejected() uint64 { return c.rejected.Load() }

// MaxOffset is the bound Observe enforces.
func (c *Clock) MaxOffset() time.Duration { return c.maxOffset }

// WallMillis extracts the wall-clock milliseconds of ts.
func WallMillis(ts uint64) int64 { return int64(ts >> logicalBits) }
