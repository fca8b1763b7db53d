package command

import (
	"bytes"
	"errors"
	"math"
	"strconv"

	"github.com/portico-io/portico/cachenode/keyspace"
)

// Sorted-set arguments are parsed as Redis 7.0 parses them, with C's
// strtod underneath: a score accepts leading '+', "inf"/"infinity" in any
// case, hexadecimal floats ("0x1p-3", also without an exponent: "0x10"),
// and no trailing bytes. Where Redis is strict (ZADD, ZINCRBY, WEIGHTS:
// getDoubleFromObject) and where it is lax (the min/max of ZRANGEBYSCORE:
// zslParseRange, which lets strtod skip leading spaces, reads "" and "("
// as 0, and stops at a NUL byte) is kept too, so the same arguments get
// the same answers.

// isCSpace is C's isspace in the C locale.
func isCSpace(c byte) bool { return c == ' ' || (c >= '\t' && c <= '\r') }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHexDigit(c byte) bool {
	return isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'f')
}

// hasPrefixFold reports whether b starts with lower (lower-case letters),
// ignoring case.
func hasPrefixFold(b []byte, lower string) bool {
	if len(b) < len(lower) {
		return false
	}
	for i := range len(lower) {
		if b[i]|0x20 != lower[i] {
			return false
		}
	}
	return true
}

// strtod reads the longest prefix of b that glibc's strtod would: leading
// white space, an optional sign, then "inf", "infinity", "nan", "nan(...)",
// a hexadecimal or a decimal float. n is the bytes used (0 when no number
// was found: f is then 0). erange is strtod's ERANGE as Redis tests it: the
// value overflowed to ±inf, or a non-zero number underflowed to 0.
func strtod(b []byte) (f float64, n int, erange bool) {
	i := 0
	for i < len(b) && isCSpace(b[i]) {
		i++
	}
	start := i
	neg := false
	if i < len(b) && (b[i] == '+' || b[i] == '-') {
		neg = b[i] == '-'
		i++
	}
	signed := func(v float64) float64 {
		if neg {
			return -v
		}
		return v
	}
	switch {
	case hasPrefixFold(b[i:], "infinity"):
		return signed(math.Inf(1)), i + 8, false
	case hasPrefixFold(b[i:], "inf"):
		return signed(math.Inf(1)), i + 3, false
	case hasPrefixFold(b[i:], "nan"):
		j := i + 3
		if j < len(b) && b[j] == '(' {
			k := j + 1
			for k < len(b) && (isDigit(b[k]) || (b[k]|0x20 >= 'a' && b[k]|0x20 <= 'z') || b[k] == '_') {
				k++
			}
			if k < len(b) && b[k] == ')' {
				j = k + 1
			}
		}
		return math.NaN(), j, false
	}
	if i+1 < len(b) && b[i] == '0' && b[i+1]|0x20 == 'x' {
		return hexFloat(b, start, i, neg)
	}
	j, digits, nonzero := i, 0, false
	for j < len(b) && isDigit(b[j]) {
		nonzero = nonzero || b[j] != '0'
		j, digits = j+1, digits+1
	}
	if j < len(b) && b[j] == '.' {
		k := j + 1
		for k < len(b) && isDigit(b[k]) {
			nonzero = nonzero || b[k] != '0'
			k, digits = k+1, digits+1
		}
		if digits > 0 {
			j = k
		}
	}
	if digits == 0 {
		return 0, 0, false
	}
	j = exponent(b, j, 'e')
	v, err := strconv.ParseFloat(string(b[start:j]), 64)
	return v, j, errors.Is(err, strconv.ErrRange) || (v == 0 && nonzero)
}

// exponent returns where an exponent ("e"/"p", an optional sign, at least
// one digit) starting at b[j] ends, or j when there is none.
func exponent(b []byte, j int, mark byte) int {
	if j >= len(b) || b[j]|0x20 != mark {
		return j
	}
	k := j + 1
	if k < len(b) && (b[k] == '+' || b[k] == '-') {
		k++
	}
	if k >= len(b) || !isDigit(b[k]) {
		return j
	}
	for k < len(b) && isDigit(b[k]) {
		k++
	}
	return k
}

// hexFloat is strtod's hexadecimal case: b[i:] starts with "0x". Without
// a digit after it, strtod reads only the "0".
func hexFloat(b []byte, start, i int, neg bool) (float64, int, bool) {
	j, digits, nonzero := i+2, 0, false
	for j < len(b) && isHexDigit(b[j]) {
		nonzero = nonzero || b[j] != '0'
		j, digits = j+1, digits+1
	}
	if j < len(b) && b[j] == '.' {
		k := j + 1
		for k < len(b) && isHexDigit(b[k]) {
			nonzero = nonzero || b[k] != '0'
			k, digits = k+1, digits+1
		}
		if digits > 0 {
			j = k
		}
	}
	if digits == 0 {
		if neg {
			return math.Copysign(0, -1), i + 1, false
		}
		return 0, i + 1, false
	}
	end := exponent(b, j, 'p')
	lit := make([]byte, 0, end-start+2)
	lit = append(lit, b[start:end]...)
	if end == j { // Go wants the binary exponent
		lit = append(lit, 'p', '0')
	}
	v, err := strconv.ParseFloat(string(lit), 64)
	return v, end, errors.Is(err, strconv.ErrRange) || (v == 0 && nonzero)
}

// parseScore parses a score, an increment or a weight as Redis's
// getDoubleFromObject: the whole argument, no leading space, not NaN, and
// not out of range (overflowing to ±inf or underflowing to 0; "inf"
// itself is fine).
func parseScore(b []byte) (float64, bool) {
	if len(b) == 0 || isCSpace(b[0]) {
		return 0, false
	}
	f, n, erange := strtod(b)
	if n != len(b) || erange || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

// parseScoreBound parses one end of a score range as Redis's
// zslParseRange: "(" makes it exclusive; the rest, up to a NUL byte (it
// is a C string there), must be a number strtod reads whole.
func parseScoreBound(b []byte) (f float64, ex, ok bool) {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	if len(b) > 0 && b[0] == '(' {
		ex, b = true, b[1:]
	}
	f, n, _ := strtod(b)
	if n != len(b) || math.IsNaN(f) {
		return 0, false, false
	}
	return f, ex, true
}

// parseScoreRange parses ZRANGEBYSCORE's min and max.
func parseScoreRange(min, max []byte) (keyspace.ScoreRange, bool) {
	lo, loEx, ok1 := parseScoreBound(min)
	hi, hiEx, ok2 := parseScoreBound(max)
	return keyspace.ScoreRange{Min: lo, Max: hi, MinEx: loEx, MaxEx: hiEx}, ok1 && ok2
}

// parseLexBound parses one end of a lex range as Redis's
// zslParseLexRangeItem: "-", "+", "(member" or "[member".
func parseLexBound(b []byte) (keyspace.LexBound, bool) {
	if len(b) == 0 {
		return keyspace.LexBound{}, false
	}
	switch b[0] {
	case '+', '-':
		if len(b) > 1 && b[1] != 0 { // C string: "+\0…" is "+"
			return keyspace.LexBound{}, false
		}
		inf := int8(1)
		if b[0] == '-' {
			inf = -1
		}
		return keyspace.LexBound{Inf: inf, Ex: true}, true
	case '(':
		return keyspace.LexBound{S: string(b[1:]), Ex: true}, true
	case '[':
		return keyspace.LexBound{S: string(b[1:])}, true
	}
	return keyspace.LexBound{}, false
}

// parseLexRange parses ZRANGEBYLEX's min and max.
func parseLexRange(min, max []byte) (keyspace.LexRange, bool) {
	lo, ok1 := parseLexBound(min)
	hi, ok2 := parseLexBound(max)
	return keyspace.LexRange{Min: lo, Max: hi}, ok1 && ok2
}
