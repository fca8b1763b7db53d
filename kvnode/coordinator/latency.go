package coordinator

import (
	"slices"
	"sync"
	"time"
)

// latency keeps an EWMA per replica (to pick the fastest replicas for a
// read) and a window of recent replica read latencies whose p99 is the
// speculative-retry threshold.
type latency struct {
	mu     sync.Mutex
	ewma   map[string]float64
	window []time.Duration
	next   int
	seen   int
	p99    time.Duration
}

const latencyWindow = 512

func newLatency() *latency {
	return &latency{ewma: map[string]float64{}, window: make([]time.Duration, 0, latencyWindow)}
}

func (l *latency) observe(node string, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur, ok := l.ewma[node]; ok {
		l.ewma[node] = 0.8*cur + 0.2*float64(d)
	} else {
		l.ewma[node] = float64(d)
	}
	if len(l.window) < latencyWindow {
		l.window = append(l.window, d)
	} else {
		l.window[l.next] = d
		l.next = (l.next + 1) % latencyWindow
	}
	l.seen++
	if l.seen%64 == 0 || len(l.window) < 64 {
		s := slices.Clone(l.window)
		slices.Sort(s)
		l.p99 = s[len(s)*99/100]
	}
}

// penalize raises node's EWMA by a failed call's duration without
// counting it in the p99 window.
func (l *latency) penalize(node string, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ewma[node] = 0.5*l.ewma[node] + 0.5*float64(2*d)
}

// sort orders nodes fastest first; nodes never measured count as fastest so
// they get measured.
func (l *latency) sort(nodes []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	slices.SortStableFunc(nodes, func(a, b string) int {
		la, lb := l.ewma[a], l.ewma[b]
		switch {
		case la < lb:
			return -1
		case la > lb:
			return 1
		}
		return 0
	})
}

func (l *latency) threshold(floor time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(floor, l.p99)
}
