package worker

import (
	"testing"
	"time"

	"github.com/portico-io/portico/scheduler/jobspec"
)

func TestBackoffFullJitter(t *testing.T) {
	r := jobspec.Retry{InitialBackoffMs: 100, MaxBackoffMs: 1000}
	for _, c := range []struct {
		attempt int
		u       float64
		want    time.Duration
	}{
		{1, 0.999, 99900 * time.Microsecond}, // ceiling 100ms
		{2, 0.5, 100 * time.Millisecond},     // ceiling 200ms
		{4, 1, 800 * time.Millisecond},
		{5, 1, time.Second}, // capped at maxBackoff
		{60, 0.25, 250 * time.Millisecond},
		{3, 0, 0},
	} {
		if got := Backoff(r, c.attempt, c.u); got != c.want {
			t.Errorf("Backoff(attempt %d, u %v) = %v, want %v", c.attempt, c.u, got, c.want)
		}
	}
}
