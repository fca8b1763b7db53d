package command

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"testing"
)

// The cases below were checked against glibc's strtod and redis-server
// 7.0 (the conformance script sends many of them to both).
func TestParseScore(t *testing.T) {
	for in, want := range map[string]float64{
		"1": 1, "-2.5": -2.5, "+.5": 0.5, "5.": 5, "1e3": 1000, "1E-2": 0.01, "0x10": 16, "0x1p-2": 0.25, "0X.8P1": 1,
		"inf": math.Inf(1), "-Infinity": math.Inf(-1), "+INF": math.Inf(1), "007": 7, "4.9e-324": math.SmallestNonzeroFloat64,
		"1.7976931348623157e308": math.MaxFloat64, "-0": math.Copysign(0, -1), "0x1p-1074": math.SmallestNonzeroFloat64,
	} {
		got, ok := parseScore([]byte(in))
		if !ok || got != want || math.Signbit(got) != math.Signbit(want) {
			t.Errorf("parseScore(%q) = %v %v, want %v", in, got, ok, want)
		}
	}
	for _, in := range []string{"", " 1", "1 ", "x", "nan", "-nan", "nan(1)", "1e", "1e+", "0x", "0x1p", ".", "+", "1_0", "1e400",
		"-1e400", "1e-400", "0x1p-1075", "0x1p1024", "1\x00", "infinit", "1.7976931348623159e308", "--1", "\t1"} {
		if got, ok := parseScore([]byte(in)); ok {
			t.Errorf("parseScore(%q) = %v, want an error", in, got)
		}
	}
	// Range bounds are laxer: leading space, "" and "(" as 0, overflow to
	// inf, a NUL ends the string.
	for in, want := range map[string]float64{" 1": 1, "": 0, "(": 0, "1e400": math.Inf(1), "2\x00junk": 2, "(\v3": 3} {
		got, _, ok := parseScoreBound([]byte(in))
		if !ok || got != want {
			t.Errorf("parseScoreBound(%q) = %v %v, want %v", in, got, ok, want)
		}
	}
	for _, in := range []string{"((1", "1 ", "x", "nan", "(nan", " ", "1e"} {
		if _, _, ok := parseScoreBound([]byte(in)); ok {
			t.Errorf("parseScoreBound(%q) accepted", in)
		}
	}
}

var scoreSeeds = []string{"1", "(1", "-inf", "+inf", "(-inf", "inf", "(", "", " 1", "1 ", "0x1p3", "(0X.8p-2", "1e400", "1e-400",
	"nan", "(nan(abc)", "1\x00x", "((1", "-0", "+.5", "5.", ".", "1e", "0x", "INFINITY", "\v\f\r\n\t 7", "1_0", "99999999999999999999999"}

// FuzzParseScoreRange: the score-range parser never panics; what it
// accepts is never NaN; "(" decides openness; every argument Go's own
// parser reads (no '_', no leading space) it reads to the same value; the
// strict parser (ZADD) accepts a subset of what the range parser does, with
// the same values; and the range then contains exactly the values between
// its ends.
func FuzzParseScoreRange(f *testing.F) {
	for i, s := range scoreSeeds {
		f.Add([]byte(s), []byte(scoreSeeds[(i+7)%len(scoreSeeds)]))
	}
	f.Fuzz(func(t *testing.T, min, max []byte) {
		r, ok := parseScoreRange(min, max)
		lo, loEx, ok1 := parseScoreBound(min)
		hi, hiEx, ok2 := parseScoreBound(max)
		if ok != (ok1 && ok2) {
			t.Fatalf("range %v, bounds %v %v", ok, ok1, ok2)
		}
		for _, b := range []struct {
			arg []byte
			v   float64
			ex  bool
			ok  bool
		}{{min, lo, loEx, ok1}, {max, hi, hiEx, ok2}} {
			arg := b.arg
			if i := bytes.IndexByte(arg, 0); i >= 0 {
				arg = arg[:i]
			}
			num := strings.TrimPrefix(string(arg), "(")
			if len(num) > 0 && !isCSpace(num[0]) && !strings.Contains(num, "_") {
				g, err := strconv.ParseFloat(num, 64)
				if err == nil && !math.IsNaN(g) && (!b.ok || g != b.v) {
					t.Fatalf("%q: %v %v, strconv reads %v", b.arg, b.v, b.ok, g)
				}
			}
			if !b.ok {
				continue
			}
			if math.IsNaN(b.v) {
				t.Fatalf("%q parsed to NaN", b.arg)
			}
			if b.ex != (len(arg) > 0 && arg[0] == '(') {
				t.Fatalf("%q: exclusive %v", b.arg, b.ex)
			}
		}
		for _, arg := range [][]byte{min, max} {
			if v, ok := parseScore(arg); ok {
				w, ex, okb := parseScoreBound(arg)
				if !okb || ex || w != v || math.IsNaN(v) {
					t.Fatalf("%q: strict %v, lax %v %v %v", arg, v, w, ex, okb)
				}
			}
		}
		if !ok {
			return
		}
		for _, v := range []float64{lo, hi, math.Inf(-1), math.Inf(1), 0, (lo + hi) / 2, math.Nextafter(lo, math.Inf(1)), math.Nextafter(hi, math.Inf(-1))} {
			if math.IsNaN(v) {
				continue
			}
			in := (v > lo || (v == lo && !loEx)) && (v < hi || (v == hi && !hiEx))
			if r.Contains(v) != in {
				t.Fatalf("range %+v contains %v: %v", r, v, r.Contains(v))
			}
			if r.Empty() && r.Contains(v) {
				t.Fatalf("empty range %+v contains %v", r, v)
			}
		}
	})
}

// FuzzParseLexRange: the lex-range parser never panics; it accepts
// exactly "-", "+" (up to a NUL), "(member" and "[member"; and the range
// holds exactly the members between its ends.
func FuzzParseLexRange(f *testing.F) {
	seeds := []string{"-", "+", "[a", "(a", "[", "(", "", "a", "-x", "+\x00x", "[\x00", "(zz", "[b"}
	for i, s := range seeds {
		f.Add([]byte(s), []byte(seeds[(i+5)%len(seeds)]), []byte("b"))
	}
	f.Fuzz(func(t *testing.T, min, max, member []byte) {
		r, ok := parseLexRange(min, max)
		valid := func(b []byte) bool {
			if len(b) == 0 {
				return false
			}
			switch b[0] {
			case '(', '[':
				return true
			case '+', '-':
				return len(b) == 1 || b[1] == 0
			}
			return false
		}
		if ok != (valid(min) && valid(max)) {
			t.Fatalf("parseLexRange(%q, %q) = %v", min, max, ok)
		}
		if !ok {
			return
		}
		// inside reports whether m is on the range's side of bound b (after
		// it as a minimum, before it as a maximum).
		inside := func(b []byte, m string, isMin bool) bool {
			switch b[0] {
			case '-':
				return isMin
			case '+':
				return !isMin
			}
			s := string(b[1:])
			if isMin {
				return m > s || (m == s && b[0] == '[')
			}
			return m < s || (m == s && b[0] == '[')
		}
		for _, m := range []string{string(member), "", string(min), string(max), "\xff\xff"} {
			want := inside(min, m, true) && inside(max, m, false)
			if r.Contains(m) != want {
				t.Fatalf("range (%q, %q) contains %q: %v", min, max, m, r.Contains(m))
			}
			if r.Empty() && want {
				t.Fatalf("range (%q, %q) is empty but holds %q", min, max, m)
			}
		}
	})
}

var zsetFuzzSeeds = []string{
	"ZADD z 1 a 2 b 3 c\nZRANGE z 0 -1 WITHSCORES\nZRANGE z (1 +inf BYSCORE REV LIMIT 1 -1\nZRANGEBYLEX z - + LIMIT -1 5\nZPOPMIN z 9223372036854775807",
	"ZADD z NX XX GT LT CH INCR 1 a\nZADD z INCR inf a\nZINCRBY z -inf a\nZMSCORE z a b\nZRANK z a\nZREVRANK z nosuch\nZCARD z",
	"ZUNIONSTORE d 2 z z WEIGHTS inf 0 AGGREGATE MIN\nZINTER 9223372036854775807 z\nZDIFF 1 z WITHSCORES\nZINTERCARD 2 z d LIMIT 1",
	"ZADD z 0 a 0 b 0 c\nZREMRANGEBYLEX z [a (c\nZREMRANGEBYRANK z -9223372036854775808 9223372036854775807\nZREMRANGEBYSCORE z -inf (inf",
	"ZSCAN z 18446744073709551615 COUNT 1 MATCH *\nZSCAN z 0 COUNT 9223372036854775807\nZRANDMEMBER z -3 WITHSCORES\nZRANDMEMBER z 9223372036854775807",
	"ZRANGESTORE d z 0 -1\nZRANGESTORE z d (0x1p3 nan BYSCORE\nZCOUNT z ( (\nZLEXCOUNT z + -\nSET s v\nZADD s 1 a\nZUNION 2 z s",
}

// FuzzZsetExec runs arbitrary sorted-set command sequences through a
// standalone and a cluster engine: every reply must be one well-formed
// RESP value (fuzzRun), whatever the arguments.
func FuzzZsetExec(f *testing.F) {
	for _, s := range zsetFuzzSeeds {
		f.Add([]byte(s))
	}
	standalone, _ := newFuzzEngine(f)
	clustered := newFuzzClusterEngine(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, e := range []*Engine{standalone, clustered} {
			fuzzRun(t, e, data)
		}
	})
}
