package jobspec

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

type fakeDNS map[string][]string

func (f fakeDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range f[host] {
		out = append(out, netip.MustParseAddr(a))
	}
	if out == nil {
		return nil, errors.New("no such host")
	}
	return out, nil
}

func TestGuard(t *testing.T) {
	dns := fakeDNS{"public.test": {"93.184.215.14"}, "mixed.test": {"93.184.215.14", "10.1.2.3"},
		"loop.test": {"127.0.0.1"}, "v6.test": {"2606:2800:21f:cb07:6820:80da:af6b:8b2c"},
		"reports.internal": {"10.20.0.5"}, "meta.internal": {"169.254.169.254"}, "rebind.internal": {"10.20.0.6", "127.0.0.1"},
		"v6meta.internal": {"fe80::1"}, "localhost": {"127.0.0.1", "::1"},
		"6to4.test": {"2002:a9fe:a9fe::1"}, "teredo.test": {"2001:0:4136:e378:8000:63bf:3fff:fdd2"}}
	cases := []struct {
		allow, url string
		ok         bool
	}{
		{"", "http://public.test/x", true},
		{"", "http://mixed.test/", false}, // every address must pass
		{"", "http://loop.test/", false},
		{"", "http://10.0.0.1/", false},
		{"", "http://169.254.169.254/latest/meta-data", false},
		{"", "http://[::1]/", false},
		{"", "http://[fd00::1]/", false},
		{"", "http://100.64.0.1/", false},
		{"", "https://v6.test/", true},
		{"", "http://nowhere.test/", false},
		{"127.0.0.0/8", "http://loop.test:8080/", true},
		{"127.0.0.0/8", "http://public.test/", false}, // a list is exclusive
		{"reports.internal", "http://reports.internal/", true},
		{"reports.internal:8443", "https://reports.internal/", false},
		{"reports.internal:8443", "https://reports.internal:8443/", true},
		{"127.0.0.1:9000", "http://127.0.0.1:9000/", true},
		{"127.0.0.1:9000", "http://127.0.0.1:9001/", false},
		// IPv6 forms that embed or tunnel to an IPv4 address are not public.
		{"", "http://[2002:a9fe:a9fe::1]/", false},                    // 6to4 of 169.254.169.254
		{"", "http://6to4.test/", false},                              // the same, resolved
		{"", "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", false}, // Teredo
		{"", "http://teredo.test/", false},
		{"", "http://[64:ff9b:1::a9fe:a9fe]/", false}, // NAT64 local-use
		{"", "http://[64:ff9b::a9fe:a9fe]/", false},   // NAT64 well-known
		{"", "http://[::a9fe:a9fe]/", false},          // IPv4-compatible ::169.254.169.254
		{"", "http://[::7f00:1]/", false},             // IPv4-compatible ::127.0.0.1
		{"", "http://[100::1]/", false},               // discard-only
		// A host allowed by name is still resolved, and dialled only at
		// addresses that are not loopback (unless the name is localhost),
		// link-local (cloud metadata), unspecified or multicast.
		{"meta.internal", "http://meta.internal/", false},
		{"rebind.internal", "http://rebind.internal/", false},
		{"v6meta.internal", "http://v6meta.internal/", false},
		{"localhost:18900", "http://localhost:18900/", true},
		{"nowhere.test", "http://nowhere.test/", false},
	}
	for _, c := range cases {
		g, err := NewGuard(c.allow, dns)
		if err != nil {
			t.Fatal(err)
		}
		err = g.CheckURL(context.Background(), c.url)
		if (err == nil) != c.ok {
			t.Errorf("allow %q, %s: err=%v, want ok=%v", c.allow, c.url, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrForbiddenTarget) {
			t.Errorf("%s: %v does not wrap ErrForbiddenTarget", c.url, err)
		}
	}
	if _, err := NewGuard("10.0.0.0/33", nil); err == nil {
		t.Error("bad CIDR accepted")
	}
}

func TestNextAfter(t *testing.T) {
	ts := func(s string) *time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return &v
	}
	fixed := Spec{Schedule: Schedule{Type: TypeFixedRate, Every: "PT15M", Anchor: ts("2026-10-06T00:00:00Z"), EndAt: ts("2026-10-06T01:00:00Z")}}
	got, ok := fixed.NextAfter(*ts("2026-10-06T00:20:00Z"))
	if !ok || !got.Equal(*ts("2026-10-06T00:30:00Z")) {
		t.Errorf("fixed rate: %v %v", got, ok)
	}
	if got, ok := fixed.NextAfter(*ts("2026-10-06T00:45:00Z")); !ok || !got.Equal(*ts("2026-10-06T01:00:00Z")) {
		t.Errorf("fixed rate at end: %v %v", got, ok)
	}
	if _, ok := fixed.NextAfter(*ts("2026-10-06T01:00:00Z")); ok {
		t.Error("fixed rate past endAt still fires")
	}
	c := Spec{Schedule: Schedule{Type: TypeCron, Expression: "30 2 * * *", TimeZone: "Asia/Kolkata", StartAt: ts("2026-10-12T00:00:00+05:30")}}
	if got, ok := c.First(*ts("2026-10-01T00:00:00Z")); !ok || !got.Equal(*ts("2026-10-11T21:00:00Z")) {
		t.Errorf("cron with startAt: %v %v", got, ok)
	}
	for _, d := range []string{"PT", "P", "5m", "PT5.5M", "-PT5M"} {
		if _, err := ParseISODuration(d); err == nil {
			t.Errorf("ParseISODuration(%q) accepted", d)
		}
	}
	if d, err := ParseISODuration("P1DT2H3M4S"); err != nil || d != 26*time.Hour+3*time.Minute+4*time.Second {
		t.Errorf("P1DT2H3M4S = %v, %v", d, err)
	}
}

func TestRenderUsesTheSlot(t *testing.T) {
	s := Spec{Schedule: Schedule{Type: TypeCron, Expression: "30 2 * * *", TimeZone: "Asia/Kolkata"},
		Target: Target{Type: TargetHTTP, HTTP: &HTTPTarget{URL: "http://x/"}, Payload: []byte(`{"d":"{{scheduledDate}}","at":"{{scheduledAt}}","id":"{{jobId}}"}`)}}
	got := string(s.Render(RunValues{JobID: 7, ScheduledAt: time.Date(2026, 10, 11, 21, 0, 0, 0, time.UTC)}))
	if want := `{"d":"2026-10-12","at":"2026-10-11T21:00:00Z","id":"7"}`; got != want {
		t.Fatalf("Render = %s, want %s", got, want)
	}
	if k := IdempotencyKey(7, time.Date(2026, 10, 11, 21, 0, 0, 0, time.UTC)); k != "7:2026-10-11T21:00:00Z" {
		t.Fatalf("key %s", k)
	}
}

func TestPriorityJitterAndReplaceValidation(t *testing.T) {
	base := func(exec string) *Spec {
		s, err := Decode(strings.NewReader(`{"tenant":"t","schedule":{"type":"ONE_OFF","at":"2030-01-01T00:00:00Z"},
			"target":{"type":"HTTP","http":{"url":"http://x.test/"}},"execution":` + exec + `}`))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for exec, field := range map[string]string{
		`{"priority":"URGENT"}`:         "execution.priority",
		`{"jitterSeconds":-1}`:          "execution.jitterSeconds",
		`{"jitterSeconds":3601}`:        "execution.jitterSeconds",
		`{"concurrencyPolicy":"QUEUE"}`: "execution.concurrencyPolicy",
		`{"priority":"HIGH","jitterSeconds":3600,"concurrencyPolicy":"REPLACE"}`: "",
	} {
		err := base(exec).Normalize(context.Background(), nil)
		var fe *FieldError
		switch {
		case field == "" && err != nil:
			t.Errorf("%s: %v", exec, err)
		case field != "" && (!errors.As(err, &fe) || fe.Field != field):
			t.Errorf("%s: %v, want a field error on %s", exec, err, field)
		}
	}
	s := base(`{}`)
	if err := s.Normalize(context.Background(), nil); err != nil || s.Execution.Priority != PriorityNormal || PriorityRank(s.Execution.Priority) != 1 {
		t.Fatalf("defaults: %v %+v", err, s.Execution)
	}
	if s.StartJitter(1, time.Unix(0, 0)) != 0 {
		t.Fatal("jitter without jitterSeconds")
	}
	s.Execution.JitterSeconds = 10
	slot := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	seen := map[time.Duration]bool{}
	for i := range int64(200) {
		j := s.StartJitter(i, slot)
		if j < 0 || j >= 10*time.Second || j != s.StartJitter(i, slot) {
			t.Fatalf("job %d: jitter %v not stable in [0, 10s)", i, j)
		}
		seen[j.Truncate(time.Second)] = true
	}
	if len(seen) < 8 {
		t.Fatalf("jitter hardly spreads: %v", seen)
	}
}

func TestSecretRefAndMaxDeferValidation(t *testing.T) {
	spec := func(http, exec string) *Spec {
		s, err := Decode(strings.NewReader(`{"tenant":"t","schedule":{"type":"ONE_OFF","at":"2030-01-01T00:00:00Z"},
			"target":{"type":"HTTP","http":` + http + `},"execution":` + exec + `}`))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for in, field := range map[string]string{
		`{"url":"http://x.test/","secretRef":{"name":"a/b"}}`:                                         "target.http.secretRef.name",
		`{"url":"http://x.test/","secretRef":{"name":"..data"}}`:                                      "target.http.secretRef.name",
		`{"url":"http://x.test/","secretRef":{"name":"k","header":"Host"}}`:                           "target.http.secretRef.header",
		`{"url":"http://x.test/","secretRef":{"name":"k","header":"a:b"}}`:                            "target.http.secretRef.header",
		`{"url":"http://x.test/","headers":{"authorization":"x"},"secretRef":{"name":"k"}}`:           "target.http.secretRef.header",
		`{"url":"http://x.test/","secretRef":{"name":"k","prefix":"Bearer \u0000"}}`:                  "target.http.secretRef.prefix",
		`{"url":"http://x.test/","secretRef":{"name":"token.v2_A-1","header":"X-Key","prefix":"K "}}`: "",
	} {
		err := spec(in, `{}`).Normalize(context.Background(), nil)
		var fe *FieldError
		switch {
		case field == "" && err != nil:
			t.Errorf("%s: %v", in, err)
		case field != "" && (!errors.As(err, &fe) || fe.Field != field):
			t.Errorf("%s: %v, want a field error on %s", in, err, field)
		}
	}
	s := spec(`{"url":"http://x.test/","secretRef":{"name":"k"}}`, `{}`)
	if err := s.Normalize(context.Background(), nil); err != nil || s.Target.HTTP.SecretRef.Header != "Authorization" ||
		s.Execution.MaxDeferSeconds != DefaultMaxDeferSeconds || s.Execution.MaxDefer() != time.Hour {
		t.Fatalf("defaults: %v %+v %+v", err, s.Target.HTTP.SecretRef, s.Execution)
	}
	if (Execution{}).MaxDefer() != time.Hour {
		t.Fatal("a spec stored before maxDeferSeconds existed must get the default")
	}
	for _, bad := range []string{`{"maxDeferSeconds":-1}`, `{"maxDeferSeconds":604801}`} {
		var fe *FieldError
		if err := spec(`{"url":"http://x.test/"}`, bad).Normalize(context.Background(), nil); !errors.As(err, &fe) || fe.Field != "execution.maxDeferSeconds" {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// A non-ASCII host is checked as written but dialled in its IDNA form,
// possibly another name: only ASCII (xn--) hosts are accepted.
func TestURLHostsAreASCII(t *testing.T) {
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, raw := range []string{"https://api.str\u0130pe.com/v1", "https://b\u00fccher.example/"} {
		s := &Spec{Tenant: "t", Schedule: Schedule{Type: TypeOneOff, At: &at}, Target: Target{Type: TargetHTTP, HTTP: &HTTPTarget{URL: raw}}}
		var fe *FieldError
		if err := s.Normalize(context.Background(), nil); !errors.As(err, &fe) || fe.Field != "target.http.url" {
			t.Errorf("%s: %v, want a field error on target.http.url", raw, err)
		}
		s = &Spec{Tenant: "t", Schedule: Schedule{Type: TypeOneOff, At: &at}, Target: Target{Type: TargetHTTP, HTTP: &HTTPTarget{URL: "https://xn--bcher-kva.example/"}},
			Notifications: &Notifications{OnFailure: []string{raw}}}
		if err := s.Normalize(context.Background(), nil); !errors.As(err, &fe) || fe.Field != "notifications.onFailure[0]" {
			t.Errorf("notification %s: %v", raw, err)
		}
	}
}
