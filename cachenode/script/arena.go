package script

import (
	"math"
	"strconv"
)

// arena holds the arguments redis.call passes to the Caller, so a call
// does not allocate them one by one. The Caller may keep them past the
// script's end (its command batch reports the keys it touched when it
// ends, after the vm is back in its pool and maybe running another
// connection's script), so chunks are never reused: each run starts with
// fresh ones, and a full chunk is replaced, never grown. What a run's
// calls used is garbage once nothing refers to it.
type arena struct {
	buf  []byte
	args [][]byte
}

const (
	arenaBytes      = 4 << 10 // a chunk of argument bytes
	arenaArgs       = 128     // a chunk of argument slices
	arenaFirstBytes = 512     // a run's first chunks: most scripts need no more
	arenaFirstArgs  = 16
)

// reset starts a run with no chunk: the previous run's arguments stay
// where they are for whoever still refers to them.
func (a *arena) reset() {
	a.buf, a.args = nil, nil
}

// slice returns n argument slots, valid for as long as they are referred to.
func (a *arena) slice(n int) [][]byte {
	if len(a.args)+n > cap(a.args) {
		if n > arenaArgs/4 {
			return make([][]byte, n)
		}
		a.args = make([][]byte, 0, chunk(cap(a.args), arenaFirstArgs, arenaArgs))
	}
	i := len(a.args)
	a.args = a.args[:i+n]
	return a.args[i : i+n : i+n]
}

// arenaCopy copies s into a. Its capacity is its length, so a Caller
// appending to it cannot reach the next one.
func arenaCopy[T string | []byte](a *arena, s T) []byte {
	if len(a.buf)+len(s) > cap(a.buf) {
		if len(s) > arenaBytes/4 {
			return append([]byte(nil), s...)
		}
		a.buf = make([]byte, 0, chunk(cap(a.buf), arenaFirstBytes, arenaBytes))
	}
	i := len(a.buf)
	a.buf = append(a.buf, s...)
	return a.buf[i:len(a.buf):len(a.buf)]
}

// chunk is the size of the next chunk after one of capacity had: a small
// first one, then full ones.
func chunk(had, first, full int) int {
	if had == 0 {
		return first
	}
	return full
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
