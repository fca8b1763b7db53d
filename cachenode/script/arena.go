package script

import (
	"math"
	"strconv"
)

// arena holds the arguments redis.call passes to the Caller, so a call
// does not allocate them one by one. Caller may keep them until the
// script ends, so a run only appends; the next run on the same vm starts
// over. A full chunk is replaced, never grown: the arena keeps no
// reference to it, so what a long script's earlier calls used is garbage
// as soon as their commands are done with it, as before.
type arena struct {
	buf  []byte
	args [][]byte
}

const (
	arenaBytes = 4 << 10 // a chunk of argument bytes
	arenaArgs  = 128     // a chunk of argument slices
)

// reset starts a run. Only between runs: no Caller holds the previous
// run's arguments any more.
func (a *arena) reset() {
	a.buf = a.buf[:0]
	a.args = a.args[:0]
}

// slice returns n argument slots, valid until the next reset.
func (a *arena) slice(n int) [][]byte {
	if len(a.args)+n > cap(a.args) {
		if n > arenaArgs/4 {
			return make([][]byte, n)
		}
		a.args = make([][]byte, 0, arenaArgs)
	}
	i := len(a.args)
	a.args = a.args[:i+n]
	return a.args[i : i+n : i+n]
}

// arenaCopy copies s into a, valid until the next reset. Its capacity is
// its length, so a Caller appending to it cannot reach the next one.
func arenaCopy[T string | []byte](a *arena, s T) []byte {
	if len(a.buf)+len(s) > cap(a.buf) {
		if len(s) > arenaBytes/4 {
			return append([]byte(nil), s...)
		}
		a.buf = make([]byte, 0, arenaBytes)
	}
	i := len(a.buf)
	a.buf = append(a.buf, s...)
	return a.buf[i:len(a.buf):len(a.buf)]
}

// appendNumber formats a number argument as Redis does ("%.17g"). An
// integer below 2^53 (the usual case: counters, timestamps, TTLs) prints
// the same as its decimal digits, which is faster to get.
func appendNumber(b []byte, f float64) []byte {
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 && (f != 0 || !math.Signbit(f)) {
		return strconv.AppendInt(b, int64(f), 10)
	}
	return strconv.AppendFloat(b, f, 'g', 17, 64)
}
