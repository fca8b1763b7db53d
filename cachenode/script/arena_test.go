package script

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// appendNumber's integer shortcut prints what "%.17g" prints.
func TestAppendNumber(t *testing.T) {
	vals := []float64{0, math.Copysign(0, -1), 1, -1, 42, 1e15, 1 << 53, -(1 << 53), 1<<53 - 1, 1e17, 1e300,
		0.1, 1.5, -2.5, math.Inf(1), math.Inf(-1), math.NaN(), 1733146000000}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		vals = append(vals, float64(r.Int64N(1<<54)-1<<53), r.NormFloat64()*1e9)
	}
	for _, f := range vals {
		if got, want := string(appendNumber(nil, f)), strconv.FormatFloat(f, 'g', 17, 64); got != want {
			t.Fatalf("appendNumber(%v) = %q, want %q", f, got, want)
		}
	}
}

// What arena hands out stays as it was while later arguments are added,
// across chunks, and a Caller appending to one cannot overwrite the next.
func TestArena(t *testing.T) {
	var a arena
	a.reset()
	var got [][]byte
	var want []string
	for i := range 3000 {
		s := strconv.Itoa(i)
		if i%500 == 0 {
			s = string(make([]byte, arenaBytes)) // larger than a chunk
		}
		args := a.slice(1)
		args[0] = arenaCopy(&a, s)
		_ = append(args[0], 'x')
		_ = append(args, nil)
		got = append(got, args[0])
		want = append(want, s)
	}
	for i := range got {
		if string(got[i]) != want[i] {
			t.Fatalf("argument %d = %q, want %q", i, got[i], want[i])
		}
	}
}
