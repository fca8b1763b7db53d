package throttle_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-io/portico/ratelimitsvc/throttle"
)

// blocking hands each event to got and then waits for release.
type blocking struct {
	got     chan throttle.Event
	release chan struct{}
}

func (b *blocking) Throttled(_ context.Context, e throttle.Event) {
	b.got <- e
	<-b.release
}

// A stuck sink never blocks Publish: the queue fills, the rest is dropped
// and counted, and once the sink moves everything queued is delivered in
// order.
func TestQueueDropsWhenFullNeverBlocks(t *testing.T) {
	const size = 4
	sink := &blocking{got: make(chan throttle.Event), release: make(chan struct{})}
	reg := prometheus.NewRegistry()
	q, err := throttle.New(throttle.Config{Sink: sink, Size: size, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- q.Run(ctx) }()
	defer func() { cancel(); close(sink.release); <-done }()

	q.Publish(throttle.Event{Rule: "r0"})
	if e := <-sink.got; e.Rule != "r0" { // the sink now holds r0 and is stuck
		t.Fatalf("first event %v", e)
	}
	start := time.Now()
	queued := 0
	for i := 1; i <= size+3; i++ {
		if q.Publish(throttle.Event{Rule: "r" + string(rune('0'+i))}) {
			queued++
		}
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("Publish took %v with a stuck sink", el)
	}
	if queued != size {
		t.Fatalf("queued %d, want %d", queued, size)
	}
	if got := gather(t, reg, "dropped"); got != 3 {
		t.Fatalf("dropped %v, want 3", got)
	}
	for i := 1; i <= size; i++ {
		sink.release <- struct{}{}
		if e := <-sink.got; e.Rule != "r"+string(rune('0'+i)) {
			t.Fatalf("event %d: %v", i, e)
		}
	}
}

func gather(t *testing.T, g prometheus.Gatherer, result string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "portico_ratelimitsvc_throttle_events_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
