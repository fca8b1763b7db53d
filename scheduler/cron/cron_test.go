package cron

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

var zones = []string{"America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata"}

// oracleNext is an independent reference: it walks instants minute by
// minute, tracks the highest wall-clock minute already shown (so repeated
// local times are not fired again) and fires at the first instant whose
// wall clock reaches a matching minute not shown before (so minutes
// skipped by a gap fire at the first instant after it).
func oracleNext(e *Expr, t time.Time, loc *time.Location, horizon time.Duration) (time.Time, bool) {
	hw := time.Time{}
	for s := t.Add(-3 * time.Hour).Truncate(time.Minute); !s.After(t); s = s.Add(time.Minute) {
		if c := Civil(s, loc); c.After(hw) {
			hw = c
		}
	}
	if c := Civil(t, loc); c.After(hw) {
		hw = c
	}
	for s := t.Truncate(time.Minute).Add(time.Minute); s.Before(t.Add(horizon)); s = s.Add(time.Minute) {
		c := Civil(s, loc)
		if !c.After(hw) {
			continue
		}
		for m := hw.Truncate(time.Minute).Add(time.Minute); !m.After(c); m = m.Add(time.Minute) {
			if e.Matches(m) {
				return s, true
			}
		}
		hw = c
	}
	return time.Time{}, false
}

// transitions returns the instants (to the hour) in [from, to) where loc's
// offset changes.
func transitions(loc *time.Location, from, to time.Time) []time.Time {
	var out []time.Time
	_, prev := from.In(loc).Zone()
	for s := from; s.Before(to); s = s.Add(30 * time.Minute) {
		if _, off := s.In(loc).Zone(); off != prev {
			out = append(out, s)
			prev = off
		}
	}
	return out
}

func randomExpr(r *rand.Rand) string {
	mins := []string{"*", "*/15", "0", "30", "0,30", "45", "*/7", "10-20", fmt.Sprint(r.IntN(60))}
	hours := []string{"*", "1", "2", "0-3", "1,2,3", "*/2", "2-4", fmt.Sprint(r.IntN(24))}
	dows := []string{"*", "*", "*", "0", "1-5", "6,0"}
	return fmt.Sprintf("%s %s * * %s", mins[r.IntN(len(mins))], hours[r.IntN(len(hours))], dows[r.IntN(len(dows))])
}

func TestNextMatchesOracleAcrossDST(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const horizon = 4 * 24 * time.Hour
	for _, z := range zones {
		loc, err := time.LoadLocation(z)
		if err != nil {
			t.Fatal(err)
		}
		points := transitions(loc, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC))
		if z != "Asia/Kolkata" && len(points) < 6 {
			t.Fatalf("%s: found %d transitions", z, len(points))
		}
		// Kolkata has no DST: sample ordinary days too.
		points = append(points, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 31, 12, 0, 0, 0, time.UTC))
		for _, p := range points {
			for range 12 {
				src := randomExpr(r)
				e, err := Parse(src)
				if err != nil {
					t.Fatalf("%q: %v", src, err)
				}
				at := p.Add(time.Duration(r.Int64N(int64(36*time.Hour))) - 30*time.Hour).Add(time.Duration(r.IntN(60)) * time.Second)
				// Chain five fires, each from the previous one, as the runner does.
				for step := range 5 {
					got, ok := e.Next(at, loc)
					want, wok := oracleNext(e, at, loc, horizon)
					if !wok {
						if ok && got.Before(at.Add(horizon)) {
							t.Fatalf("%s %q after %s: got %s, oracle none", z, src, at, got)
						}
						break
					}
					if !ok || !got.Equal(want) {
						t.Fatalf("%s %q after %s (step %d): got %s (%v), oracle %s", z, src, at.UTC(), step, got.UTC(), ok, want.UTC())
					}
					at = got
				}
			}
		}
	}
}

func TestDSTPolicyExamples(t *testing.T) {
	mustLoc := func(n string) *time.Location {
		l, err := time.LoadLocation(n)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		zone, expr, after string
		want              []string
	}{
		// Gap: 02:30 does not exist on 2026-03-08 in New York → 03:00 EDT.
		{"America/New_York", "30 2 * * *", "2026-03-07T12:00:00Z", []string{"2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
		// Overlap: 01:30 happens twice on 2026-11-01 → once, at the EDT one.
		{"America/New_York", "30 1 * * *", "2026-10-31T12:00:00Z", []string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		// Every 30 minutes through the fall-back hour: 01:00, 01:30 once each.
		{"America/New_York", "*/30 * * * *", "2026-11-01T04:45:00Z", []string{"2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z", "2026-11-01T07:00:00Z"}},
		// London spring forward: 01:15 missing on 2026-03-29 → 02:00 BST.
		{"Europe/London", "15 1 * * *", "2026-03-28T12:00:00Z", []string{"2026-03-29T01:00:00Z", "2026-03-30T00:15:00Z"}},
		// Lord Howe moves 30 minutes at 02:00 on 2026-10-04: 02:15 → 02:30 (+11:00).
		{"Australia/Lord_Howe", "15 2 * * *", "2026-10-03T00:00:00Z", []string{"2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"}},
		// Lord Howe falls back at 02:00 to 01:30 on 2026-04-05: 01:45 once.
		{"Australia/Lord_Howe", "45 1 * * *", "2026-04-04T00:00:00Z", []string{"2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"}},
		{"Asia/Kolkata", "30 2 * * *", "2026-10-11T00:00:00Z", []string{"2026-10-11T21:00:00Z", "2026-10-12T21:00:00Z"}},
	}
	for _, c := range cases {
		e, err := Parse(c.expr)
		if err != nil {
			t.Fatal(err)
		}
		at := utc(c.after)
		for _, w := range c.want {
			got, ok := e.Next(at, mustLoc(c.zone))
			if !ok || !got.Equal(utc(w)) {
				t.Fatalf("%s %q after %s: got %s, want %s", c.zone, c.expr, at, got.UTC(), w)
			}
			at = got
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, s := range []string{"", "* * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *", "* * * * 8", "5-1 * * * *", "*/0 * * * *", "a b c d e", "* * * * * *"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) accepted", s)
		}
	}
	for _, s := range []string{"@daily", "0 9 * JAN-MAR MON-FRI", "*/5 0-23/2 1,15 * 7"} {
		if _, err := Parse(s); err != nil {
			t.Errorf("Parse(%q): %v", s, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("*/5 0-23/2 1,15 * 7")
	f.Add("@hourly")
	f.Fuzz(func(t *testing.T, s string) {
		e, err := Parse(s)
		if err != nil {
			return
		}
		e.Next(time.Date(2026, 3, 8, 0, 0, 0, 0, time.UTC), time.UTC)
	})
}
