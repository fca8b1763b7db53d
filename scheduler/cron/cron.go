// Package cron parses five-field cron expressions and computes fire
// instants in an IANA time zone with a fixed daylight-saving policy.
//
// DST policy (the contract every caller relies on):
//   - gap: a local time that does not exist (clocks jump forward) fires at
//     the first valid instant after the gap, i.e. the transition instant;
//     several matching local times inside one gap fire once, together;
//   - overlap: a local time that occurs twice (clocks fall back) fires once,
//     at its first occurrence.
//
// So every intended local slot fires exactly once, and fire instants are
// strictly increasing. Expressions are evaluated on local wall-clock
// minutes; seconds are always zero.
package cron

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrSyntax is wrapped by every parse error.
var ErrSyntax = errors.New("cron: invalid expression")

// Expr is a parsed expression. The zero value matches nothing; use Parse.
// An Expr is immutable and safe for concurrent use.
type Expr struct {
	minute, hour, dom, month, dow uint64
	domStar, dowStar              bool
}

var macros = map[string]string{
	"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
	"@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

var monthNames = map[string]int{"JAN": 1, "FEB": 2, "MAR": 3, "APR": 4, "MAY": 5, "JUN": 6,
	"JUL": 7, "AUG": 8, "SEP": 9, "OCT": 10, "NOV": 11, "DEC": 12}
var dayNames = map[string]int{"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}

// Parse parses "minute hour day-of-month month day-of-week" (numbers,
// names for months and weekdays, '*', ranges, steps and lists; weekday 7
// is Sunday) or one of the @-macros. As in Vixie cron, when both
// day-of-month and day-of-week are restricted a day matching either fires.
func Parse(s string) (*Expr, error) {
	s = strings.TrimSpace(s)
	if m, ok := macros[strings.ToLower(s)]; ok {
		s = m
	}
	f := strings.Fields(s)
	if len(f) != 5 {
		return nil, fmt.Errorf("%w: want 5 fields, got %d", ErrSyntax, len(f))
	}
	var e Expr
	var err error
	if e.minute, _, err = parseField(f[0], 0, 59, nil); err != nil {
		return nil, fmt.Errorf("%w: minute: %v", ErrSyntax, err)
	}
	if e.hour, _, err = parseField(f[1], 0, 23, nil); err != nil {
		return nil, fmt.Errorf("%w: hour: %v", ErrSyntax, err)
	}
	if e.dom, e.domStar, err = parseField(f[2], 1, 31, nil); err != nil {
		return nil, fmt.Errorf("%w: day of month: %v", ErrSyntax, err)
	}
	if e.month, _, err = parseField(f[3], 1, 12, monthNames); err != nil {
		return nil, fmt.Errorf("%w: month: %v", ErrSyntax, err)
	}
	if e.dow, e.dowStar, err = parseField(f[4], 0, 7, dayNames); err != nil {
		return nil, fmt.Errorf("%w: day of week: %v", ErrSyntax, err)
	}
	if e.dow&(1<<7) != 0 {
		e.dow |= 1
	}
	return &e, nil
}

func parseField(s string, lo, hi int, names map[string]int) (bits uint64, star bool, err error) {
	if s == "" {
		return 0, false, errors.New("empty")
	}
	star = s == "*" || s == "?"
	for part := range strings.SplitSeq(s, ",") {
		rng, stepStr, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			if step, err = strconv.Atoi(stepStr); err != nil || step < 1 || step > hi {
				return 0, false, fmt.Errorf("bad step %q", stepStr)
			}
		}
		a, b := lo, hi
		switch {
		case rng == "*" || rng == "?":
		default:
			from, to, isRange := strings.Cut(rng, "-")
			if a, err = atom(from, lo, hi, names); err != nil {
				return 0, false, err
			}
			b = a
			if isRange {
				if b, err = atom(to, lo, hi, names); err != nil {
					return 0, false, err
				}
				if b < a {
					return 0, false, fmt.Errorf("range %q is backwards", rng)
				}
			} else if hasStep {
				b = hi
			}
		}
		for v := a; v <= b; v += step {
			bits |= 1 << uint(v)
		}
	}
	return bits, star, nil
}

func atom(s string, lo, hi int, names map[string]int) (int, error) {
	if v, ok := names[strings.ToUpper(s)]; ok {
		return v, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("%q is not in %d-%d", s, lo, hi)
	}
	return v, nil
}

// searchYears bounds the search for a matching local time (Feb 30 never
// matches).
const searchYears = 8

// matchesDay reports whether the civil date c is a firing day.
func (e *Expr) matchesDay(c time.Time) bool {
	d := e.dom&(1<<uint(c.Day())) != 0
	w := e.dow&(1<<uint(c.Weekday())) != 0
	switch {
	case e.domStar && e.dowStar:
		return true
	case e.domStar:
		return w
	case e.dowStar:
		return d
	}
	return d || w
}

// Matches reports whether the civil (wall-clock) minute c, read from c's
// fields regardless of its location, matches the expression.
func (e *Expr) Matches(c time.Time) bool {
	return e.month&(1<<uint(c.Month())) != 0 && e.matchesDay(c) &&
		e.hour&(1<<uint(c.Hour())) != 0 && e.minute&(1<<uint(c.Minute())) != 0
}

// nextCivil returns the first civil minute >= c (c in UTC, used as a
// zone-free calendar) that matches.
func (e *Expr) nextCivil(c time.Time) (time.Time, bool) {
	limit := c.Year() + searchYears
	for c.Year() <= limit {
		y, m, d := c.Date()
		switch {
		case e.month&(1<<uint(m)) == 0:
			c = time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)
		case !e.matchesDay(c):
			c = time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
		case e.hour&(1<<uint(c.Hour())) == 0:
			c = time.Date(y, m, d, c.Hour()+1, 0, 0, 0, time.UTC)
		case e.minute&(1<<uint(c.Minute())) == 0:
			c = c.Add(time.Minute)
		default:
			return c, true
		}
	}
	return time.Time{}, false
}

// Next returns the first fire instant strictly after t in loc, following
// the package's DST policy; ok is false when nothing matches within
// searchYears.
func (e *Expr) Next(t time.Time, loc *time.Location) (next time.Time, ok bool) {
	w := Civil(t, loc).Truncate(time.Minute)
	for {
		if w, ok = e.nextCivil(w); !ok {
			return time.Time{}, false
		}
		if inst := Resolve(w, loc); inst.After(t) {
			return inst, true
		}
		w = w.Add(time.Minute)
	}
}

// Civil returns t's wall-clock reading in loc as a UTC time (a zone-free
// calendar value).
func Civil(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	y, m, d := l.Date()
	return time.Date(y, m, d, l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// Resolve maps the civil time w (its UTC fields read as wall clock in loc)
// to an instant: the earliest instant showing w (overlap: first
// occurrence), or, when no instant shows w (gap), the first instant after
// the gap.
func Resolve(w time.Time, loc *time.Location) time.Time {
	var (
		best           time.Time
		found          bool
		minOff, maxOff = 1 << 30, -(1 << 30)
	)
	for _, probe := range []time.Duration{-48, -24, -12, 0, 12, 24, 48} {
		_, off := w.Add(probe * time.Hour).In(loc).Zone()
		minOff, maxOff = min(minOff, off), max(maxOff, off)
		cand := w.Add(-time.Duration(off) * time.Second)
		if Civil(cand, loc).Equal(w) && (!found || cand.Before(best)) {
			best, found = cand, true
		}
	}
	if found {
		return best
	}
	// Gap: the smallest instant whose wall clock is past w. lo shows a
	// time <= w and hi one > w; bisect on seconds (transitions are whole).
	lo := w.Add(-time.Duration(maxOff) * time.Second).Unix()
	hi := w.Add(-time.Duration(minOff) * time.Second).Unix()
	for lo+1 < hi {
		mid := lo + (hi-lo)/2
		if Civil(time.Unix(mid, 0), loc).After(w) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return time.Unix(hi, 0).UTC()
}
