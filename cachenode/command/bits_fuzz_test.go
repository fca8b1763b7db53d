package command

import (
	"bytes"
	"math/bits"
	"strconv"
	"testing"

	"github.com/portico-io/portico/cachenode/resp"
)

// The range arguments of BITCOUNT and BITPOS are a parser edge (negative
// indexes, BYTE/BIT units, int64 extremes): the fuzz tests check the
// replies against a bit-by-bit model written from Redis 7.0's rules, and
// that SORT's option parser always answers exactly one well-formed reply.

// execOne runs args on a fresh session of e and returns the raw reply,
// failing unless it is exactly one well-formed reply.
func execOne(t testing.TB, e *Engine, args ...[]byte) string {
	t.Helper()
	s := e.NewSession("fuzz")
	defer e.Close(s)
	var w resp.Writer
	e.Exec(s, args, &w)
	rest, err := parseReply(w.Buf)
	if err != nil || len(rest) != 0 {
		t.Fatalf("%q: reply %q is not exactly one reply (%v)", args, w.Buf, err)
	}
	return string(w.Buf)
}

func bs(args ...string) [][]byte {
	out := make([][]byte, len(args))
	for i, a := range args {
		out[i] = []byte(a)
	}
	return out
}

// modelRange is the inclusive range of units [lo, hi] Redis 7.0 selects
// from start and end over n units; ok=false when it is empty. bitcount
// adds BITCOUNT's early exit for two negative indexes out of order.
func modelRange(start, end, n int64, bitcount bool) (lo, hi int64, ok bool) {
	if bitcount && start < 0 && end < 0 && start > end {
		return 0, 0, false
	}
	if start < 0 {
		start = max(n+start, 0)
	}
	if end < 0 {
		end = max(n+end, 0)
	}
	end = min(end, n-1)
	return start, end, n > 0 && start <= end
}

// bitAt is bit i of p, most significant first.
func bitAt(p []byte, i int64) int64 { return int64(p[i/8]>>(7-i%8)) & 1 }

func modelBitCount(p []byte, start, end int64, isBit bool) int64 {
	n := int64(len(p))
	if isBit {
		n *= 8
	}
	lo, hi, ok := modelRange(start, end, n, true)
	if !ok {
		return 0
	}
	if !isBit {
		lo, hi = lo*8, hi*8+7
	}
	var c int64
	for i := lo; i <= hi; i++ {
		c += bitAt(p, i)
	}
	return c
}

func modelBitPos(p []byte, bit, start, end int64, endGiven, isBit bool) int64 {
	n := int64(len(p))
	if isBit {
		n *= 8
	}
	if !endGiven {
		end = n - 1
	}
	lo, hi, ok := modelRange(start, end, n, false)
	if !ok {
		return -1
	}
	if !isBit {
		lo, hi = lo*8, hi*8+7
	}
	for i := lo; i <= hi; i++ {
		if bitAt(p, i) == bit {
			return i
		}
	}
	if bit == 1 || endGiven {
		return -1
	}
	return (hi/8 + 1) * 8 // no end given: the string is padded with zeros
}

func intReply(n int64) string { return ":" + strconv.FormatInt(n, 10) + "\r\n" }

func FuzzBitCountBitPos(f *testing.F) {
	for _, s := range []struct {
		v          string
		start, end int64
		isBit      bool
		bit        uint8
		endGiven   bool
	}{
		{"foobar", 0, -1, false, 1, true}, {"foobar", 1, 1, false, 0, true}, {"foobar", 5, 30, true, 1, true},
		{"\xff\xf0\x00", 0, -1, false, 0, false}, {"\xff\xff", 3, 9, true, 0, true}, {"\xff\xff", 0, 0, false, 0, false},
		{"", 0, -1, false, 0, false}, {"\x00", -9223372036854775808, 9223372036854775807, true, 1, true},
		{"abc", -1, -5, false, 1, true}, {"abc", -100, -2, true, 0, true}, {"\x80", 7, 7, true, 0, false},
	} {
		f.Add([]byte(s.v), s.start, s.end, s.isBit, s.bit, s.endGiven)
	}
	e, _ := newFuzzEngine(f)
	f.Fuzz(func(t *testing.T, v []byte, start, end int64, isBit bool, bit uint8, endGiven bool) {
		if len(v) > 64 {
			v = v[:64]
		}
		b := int64(bit & 1)
		unit := "BYTE"
		if isBit {
			unit = "BIT"
		}
		execOne(t, e, []byte("SET"), []byte("k"), v)
		s, en := strconv.FormatInt(start, 10), strconv.FormatInt(end, 10)
		if got, want := execOne(t, e, bs("BITCOUNT", "k", s, en, unit)...), intReply(modelBitCount(v, start, end, isBit)); got != want {
			t.Fatalf("BITCOUNT %q %s %s %s = %q, model %q", v, s, en, unit, got, want)
		}
		args := bs("BITPOS", "k", strconv.FormatInt(b, 10), s)
		if endGiven {
			args = append(args, []byte(en), []byte(unit))
		} else if isBit {
			// BIT needs an end; without one the range is in bytes.
			isBit = false
		}
		if got, want := execOne(t, e, args...), intReply(modelBitPos(v, b, start, end, endGiven, isBit)); got != want {
			t.Fatalf("%q on %q = %q, model %q", args, v, got, want)
		}
		// The whole string: BITCOUNT is its popcount, BITPOS the first bit.
		var pop int64
		for _, x := range v {
			pop += int64(bits.OnesCount8(x))
		}
		if got := execOne(t, e, bs("BITCOUNT", "k")...); got != intReply(pop) {
			t.Fatalf("BITCOUNT %q = %q, want %d", v, got, pop)
		}
		if got, want := execOne(t, e, bs("BITPOS", "k", strconv.FormatInt(b, 10))...), intReply(modelBitPos(v, b, 0, 0, false, false)); got != want {
			t.Fatalf("BITPOS %q %d = %q, want %q", v, b, got, want)
		}
	})
}

// FuzzSortOptions feeds SORT and SORT_RO arbitrary options (split at
// spaces) over a list, a set and strings its patterns can reach: it must
// answer exactly one well-formed reply, whatever the options.
func FuzzSortOptions(f *testing.F) {
	for _, s := range []string{
		"", "DESC", "ALPHA", "LIMIT 0 2", "LIMIT -5 9223372036854775807", "LIMIT 9223372036854775807 9223372036854775807",
		"BY w_*", "BY w_* GET o_* GET #", "BY nosort DESC LIMIT 1 1", "BY h_*->f GET h_*->f", "STORE dst", "STORE",
		"GET # GET # STORE dst ALPHA", "LIMIT 1", "BY", "GET", "BY *-> GET ->", "BY \x00* GET *\x00", "ALPHA BY w_* DESC",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	e, _ := newFuzzEngine(f)
	for _, args := range [][]string{
		{"RPUSH", "l", "3", "1", "b", "2", "", " 7", "1e3", "-inf", "a"}, {"SADD", "s", "5", "3", "x"},
		{"MSET", "w_3", "30", "w_1", "10", "w_b", "zz", "o_1", "one"}, {"HSET", "h_1", "f", "2"},
	} {
		execOne(f, e, bs(args...)...)
	}
	f.Fuzz(func(t *testing.T, opts string, ro bool) {
		for _, key := range []string{"l", "s"} {
			args := [][]byte{[]byte("SORT"), []byte(key)}
			if ro {
				args[0] = []byte("SORT_RO")
			}
			if opts != "" {
				args = append(args, bytes.Split([]byte(opts), []byte(" "))...)
			}
			execOne(t, e, args...)
		}
	})
}
