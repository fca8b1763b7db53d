package peerbench

import (
	"slices"
	"testing"
)

func TestOrderAlternates(t *testing.T) {
	for rounds, want := range map[int][]Side{
		1: {Ours, Peer},
		2: {Ours, Peer, Peer, Ours},
		4: {Ours, Peer, Peer, Ours, Ours, Peer, Peer, Ours},
	} {
		if got := Order(rounds); !slices.Equal(got, want) {
			t.Errorf("Order(%d) = %v, want %v", rounds, got, want)
		}
	}
}

// Rounds pairs the runs that ran next to each other.
func TestRoundsPairsNeighbours(t *testing.T) {
	var seq []string
	o, p := Rounds(2, func(i int) int { seq = append(seq, "o"); return i }, func(i int) int { seq = append(seq, "p"); return 10 + i })
	if !slices.Equal(seq, []string{"o", "p", "p", "o"}) || !slices.Equal(o, []int{0, 1}) || !slices.Equal(p, []int{10, 11}) {
		t.Fatalf("seq %v ours %v peer %v", seq, o, p)
	}
}

func TestSpread(t *testing.T) {
	for _, c := range []struct {
		in            []float64
		med, min, max float64
	}{
		{[]float64{3}, 3, 3, 3},
		{[]float64{4, 1, 2}, 2, 1, 4},
		{[]float64{1.2, 0.8, 1.0, 1.1}, 1.05, 0.8, 1.2},
	} {
		med, lo, hi := Spread(c.in)
		if med != c.med || lo != c.min || hi != c.max {
			t.Errorf("Spread(%v) = %v %v %v, want %v %v %v", c.in, med, lo, hi, c.med, c.min, c.max)
		}
	}
	if r := Ratios([]float64{2, 3}, []float64{1, 4}); !slices.Equal(r, []float64{2, 0.75}) {
		t.Errorf("Ratios = %v", r)
	}
}

// ReportMetrics reports each side's mean and the ratio spread under the
// names tools/benchsummary reads.
func TestReportMetrics(t *testing.T) {
	type round struct{ rps float64 }
	res := testing.Benchmark(func(b *testing.B) {
		for b.Loop() {
		}
		ReportMetrics(b, []round{{100}, {300}}, []round{{50}, {100}}, []Metric[round]{
			{Name: "throughput", Unit: "req/s", Of: func(r round) float64 { return r.rps }},
		})
	})
	for unit, want := range map[string]float64{
		"portico-req/s": 200, "peer-req/s": 75,
		"throughput-ratio": 2.5, "throughput-ratio-min": 2, "throughput-ratio-max": 3,
	} {
		if got := res.Extra[unit]; got != want {
			t.Errorf("%s = %v, want %v", unit, got, want)
		}
	}
}
