package runner

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/store"
)

func everyMinute(t *testing.T, misfire, concurrency string, cap int) *jobspec.Spec {
	t.Helper()
	anchor := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &jobspec.Spec{Tenant: "t",
		Schedule:  jobspec.Schedule{Type: jobspec.TypeFixedRate, Every: "PT1M", Anchor: &anchor},
		Target:    jobspec.Target{Type: jobspec.TargetHTTP, HTTP: &jobspec.HTTPTarget{URL: "http://127.0.0.1/"}},
		Execution: jobspec.Execution{MisfirePolicy: misfire, ConcurrencyPolicy: concurrency, MisfireCap: cap}}
	if err := s.Normalize(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDecide(t *testing.T) {
	slot := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	m := func(n int) time.Time { return slot.Add(time.Duration(n) * time.Minute) }
	outage := slot.Add(5*time.Minute + 30*time.Second) // slots 10:01..10:05 missed
	cases := []struct {
		name string
		run  store.DueRun
		now  time.Time
		want store.FireDecision
	}{
		{"on time chains the next slot", store.DueRun{Live: true, ScheduledAt: slot, Spec: everyMinute(t, "", "", 0)},
			slot.Add(2 * time.Second), store.FireDecision{Status: store.StatusQueued, Next: []time.Time{m(1)}}},
		{"paused job is cancelled, no chain", store.DueRun{Live: false, ScheduledAt: slot, Spec: everyMinute(t, "", "", 0)},
			slot, store.FireDecision{Status: store.StatusCancelled}},
		{"manual run does not chain", store.DueRun{Live: true, Manual: true, ScheduledAt: slot, Spec: everyMinute(t, "", "", 0)},
			outage, store.FireDecision{Status: store.StatusQueued}},
		{"FORBID while busy skips but chains", store.DueRun{Live: true, Busy: true, ScheduledAt: slot, Spec: everyMinute(t, "", "FORBID", 0)},
			slot, store.FireDecision{Status: store.StatusSkipped, Next: []time.Time{m(1)}}},
		{"REPLACE while busy fires and replaces", store.DueRun{Live: true, Busy: true, ScheduledAt: slot, Spec: everyMinute(t, "", "REPLACE", 0)},
			slot, store.FireDecision{Status: store.StatusQueued, Next: []time.Time{m(1)}, Replace: true}},
		{"REPLACE when idle replaces nothing", store.DueRun{Live: true, ScheduledAt: slot, Spec: everyMinute(t, "", "REPLACE", 0)},
			slot, store.FireDecision{Status: store.StatusQueued, Next: []time.Time{m(1)}}},
		{"REPLACE exempts manual runs", store.DueRun{Live: true, Busy: true, Manual: true, ScheduledAt: slot, Spec: everyMinute(t, "", "REPLACE", 0)},
			slot, store.FireDecision{Status: store.StatusQueued}},
		{"ALLOW while busy fires", store.DueRun{Live: true, Busy: true, ScheduledAt: slot, Spec: everyMinute(t, "", "ALLOW", 0)},
			slot, store.FireDecision{Status: store.StatusQueued, Next: []time.Time{m(1)}}},
		{"FIRE_ONCE after outage fires once, resumes after now", store.DueRun{Live: true, ScheduledAt: slot, Spec: everyMinute(t, "FIRE_ONCE", "", 0)},
			outage, store.FireDecision{Status: store.StatusQueued, Next: []time.Time{m(6)}}},
		{"SKIP after outage skips, resumes after now", store.DueRun{Live: true, ScheduledAt: slot, Spec: everyMinute(t, "SKIP", "", 0)},
			outage, store.FireDecision{Status: store.StatusSkipped, Next: []time.Time{m(6)}}},
		{"FIRE_ALL after outage fires every missed slot", store.DueRun{Live: true, ScheduledAt: slot, Spec: everyMinute(t, "FIRE_ALL", "", 0)},
			outage, store.FireDecision{Status: store.StatusQueued, Next: []time.Time{m(1), m(2), m(3), m(4), m(5), m(6)}}},
		{"FIRE_ALL is capped to the most recent slots", store.DueRun{Live: true, ScheduledAt: slot, Spec: everyMinute(t, "FIRE_ALL", "", 3)},
			outage, store.FireDecision{Status: store.StatusQueued, Next: []time.Time{m(4), m(5), m(6)}}},
	}
	for _, c := range cases {
		got := Decide(c.run, c.now, time.Minute)
		if got.Status != c.want.Status || got.Replace != c.want.Replace || !slices.EqualFunc(got.Next, c.want.Next, time.Time.Equal) {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestDecideOneOffAlwaysFires(t *testing.T) {
	at := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &jobspec.Spec{Tenant: "t", Schedule: jobspec.Schedule{Type: jobspec.TypeOneOff, At: &at},
		Target:    jobspec.Target{Type: jobspec.TargetHTTP, HTTP: &jobspec.HTTPTarget{URL: "http://127.0.0.1/"}},
		Execution: jobspec.Execution{MisfirePolicy: jobspec.MisfireSkip}}
	if err := s.Normalize(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	got := Decide(store.DueRun{Live: true, ScheduledAt: at, Spec: s}, at.AddDate(6, 0, 0), time.Minute)
	if got.Status != store.StatusQueued || len(got.Next) != 0 {
		t.Fatalf("got %+v", got)
	}
}
