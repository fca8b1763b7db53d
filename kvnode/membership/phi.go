package membership

import (
	"math"
	"time"
)

// detector is a phi-accrual failure detector for one peer (Hayashibara et
// al.): it turns the time since the last heartbeat into a suspicion level
// relative to that peer's own rhythm, so a slow but regular peer is not
// marked down by a fixed timeout. Inter-arrival times are modelled as
// exponential, as Cassandra does: phi = Δt / (mean · ln 10).
type detector struct {
	last      time.Time
	intervals []float64 // seconds, ring buffer
	next      int
	sum       float64
	minMean   float64
}

const windowSize = 100

func newDetector(now time.Time, expected time.Duration) *detector {
	d := &detector{last: now, minMean: expected.Seconds() / 2}
	d.add(expected.Seconds())
	return d
}

func (d *detector) add(v float64) {
	if len(d.intervals) < windowSize {
		d.intervals = append(d.intervals, v)
	} else {
		d.sum -= d.intervals[d.next]
		d.intervals[d.next] = v
		d.next = (d.next + 1) % windowSize
	}
	d.sum += v
}

// heartbeat records an arrival at now.
func (d *detector) heartbeat(now time.Time) {
	if gap := now.Sub(d.last).Seconds(); gap > 0 {
		d.add(gap)
	}
	d.last = now
}

// phi is the suspicion level at now.
func (d *detector) phi(now time.Time) float64 {
	mean := max(d.sum/float64(len(d.intervals)), d.minMean)
	delta := now.Sub(d.last).Seconds()
	if delta <= 0 {
		return 0
	}
	return delta / (mean * math.Ln10)
}
