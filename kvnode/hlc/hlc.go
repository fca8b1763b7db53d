// Package hlc is a hybrid logical clock: timestamps that follow wall time
// but never go backwards on one node and always exceed every timestamp the
// node has seen from its peers, so last-write-wins orders causally related
// writes correctly even under modest clock skew.
package hlc

import (
	"sync"
	"time"
)

// Timestamp layout: wall milliseconds in the high 48 bits, a logical counter
// in the low 16.
const logicalBits = 16

// Clock is safe for concurrent use.
type Clock struct {
	mu   sync.Mutex
	last uint64
	now  func() time.Time
}

// New returns a clock reading wall time from now (time.Now when nil).
func New(now func() time.Time) *Clock {
	if now == nil {
		now = time.Now
	}
	return &Clock{now: now}
}

// Now returns a timestamp greater than every one returned or observed before.
func (c *Clock) Now() uint64 {
	wall := uint64(c.now().UnixMilli()) << logicalBits
	c.mu.Lock()
	defer c.mu.Unlock()
	if wall > c.last {
		c.last = wall
	} else {
		c.last++
	}
	return c.last
}

// Observe folds a peer's timestamp in, so later Now values exceed it.
func (c *Clock) Observe(ts uint64) {
	c.mu.Lock()
	if ts > c.last {
		c.last = ts
	}
	c.mu.Unlock()
}

// WallMillis extracts the wall-clock milliseconds of ts.
func WallMillis(ts uint64) int64 { return int64(ts >> logicalBits) }

// FromWall is the smallest timestamp at wall time t.
func FromWall(t time.Time) uint64 { return uint64(t.UnixMilli()) << logicalBits }
