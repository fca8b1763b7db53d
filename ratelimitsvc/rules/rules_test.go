package rules_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	ratelimitv1 "github.com/portico-io/portico/proto/portico/ratelimit/v1"
	"github.com/portico-io/portico/ratelimitsvc/rules"
)

func e(kv ...string) []rules.Entry {
	var out []rules.Entry
	for i := 0; i < len(kv); i += 2 {
		out = append(out, rules.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

func TestEnvoyYAMLMatching(t *testing.T) {
	rs, version, err := rules.LoadDir("testdata/envoy")
	if err != nil {
		t.Fatal(err)
	}
	if version == "" || len(rs) != 8 {
		t.Fatalf("version %q, %d rules", version, len(rs))
	}
	tab, err := rules.Build(rs, map[string]string{"file": version})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		domain  string
		entries []rules.Entry
		want    string // rule path summary: limit/window/mode or "" for none
	}{
		{"mongo_cps", e("database", "users"), "500/1s"},
		{"mongo_cps", e("database", "other"), ""},
		{"messaging", e("message_type", "marketing", "to_number", "2061234567"), "5/24h0m0s"},
		{"messaging", e("to_number", "2061234567"), "100/24h0m0s"},
		{"messaging", e("message_type", "marketing"), ""},                   // limit only at the leaf
		{"messaging", e("to_number", "1", "message_type", "marketing"), ""}, // no deeper node
		{"edge_proxy_per_ip", e("remote_address", "10.0.0.1"), "10/1s"},
		{"edge_proxy_per_ip", e("remote_address", "50.0.0.5"), "unlimited"},
		{"edge_proxy_per_ip", e("path", "/foo/bar/baz"), "20/1m0s shadow"}, // first prefix in file order, as envoyproxy
		{"edge_proxy_per_ip", e("path", "/foo/x"), "20/1m0s shadow"},
		{"nope", e("a", "b"), ""},
		{"mongo_cps", nil, ""},
	}
	for _, c := range cases {
		got := ""
		if r := tab.Match(c.domain, c.entries, ""); r != nil {
			got = summary(r)
		}
		if got != c.want {
			t.Errorf("%s %v: got %q want %q", c.domain, c.entries, got, c.want)
		}
	}
}

func summary(r *rules.Rule) string {
	if r.Unlimited {
		return "unlimited"
	}
	s := strconv.FormatUint(uint64(r.Limit), 10) + "/" + r.Window.String()
	if r.Mode == rules.Shadow {
		s += " shadow"
	}
	return s
}

func TestYAMLErrors(t *testing.T) {
	for name, doc := range map[string]string{
		"no domain":           "descriptors: []",
		"bad unit":            "domain: d\ndescriptors:\n- key: k\n  rate_limit: {unit: fortnight, requests_per_unit: 1}",
		"unknown key":         "domain: d\ndescriptors:\n- key: k\n  rate_limits: {}",
		"empty key":           "domain: d\ndescriptors:\n- value: v\n  rate_limit: {unit: second, requests_per_unit: 1}",
		"duplicate":           "domain: d\ndescriptors:\n- key: k\n- key: k",
		"unlimited with unit": "domain: d\ndescriptors:\n- key: k\n  rate_limit: {unlimited: true, unit: second}",
		"share without *":     "domain: d\ndescriptors:\n- key: k\n  value: v\n  share_threshold: true",
		"replaces itself":     "domain: d\ndescriptors:\n- key: k\n  rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: m}, {name: n}]}",
		"not yaml map":        "[1, 2",
	} {
		if _, _, err := rules.ParseYAML(name, []byte(doc)); !errors.Is(err, rules.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
}

func TestTenantOverridesAndPriority(t *testing.T) {
	mk := func(name, tenant string, prio int32, limit uint32) *ratelimitv1.RateLimitRule {
		return &ratelimitv1.RateLimitRule{Name: name, Domain: "portico", Tenant: tenant, Priority: prio, Limit: limit,
			Window: durationpb.New(time.Second), Descriptors: []*ratelimitv1.Descriptor{{Key: "consumer"}}}
	}
	var rs []*rules.Rule
	for _, p := range []*ratelimitv1.RateLimitRule{mk("base", "", 0, 5), mk("acme", "acme", 0, 50), mk("acme-hi", "acme", 10, 500), mk("global-hi", "", 5, 7)} {
		r, err := rules.FromProto(p)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	tab, err := rules.Build(rs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for tenant, want := range map[string]string{"": "global-hi", "other": "global-hi", "acme": "acme-hi"} {
		if r := tab.Match("portico", e("consumer", "c1"), tenant); r == nil || r.Name != want {
			t.Errorf("tenant %q: got %v want %s", tenant, r, want)
		}
	}
	sw := &ratelimitv1.RateLimitRule{Name: "s", Domain: "d", Limit: 1, Window: durationpb.New(time.Second),
		Algorithm: ratelimitv1.Algorithm_SLIDING_WINDOW, Descriptors: []*ratelimitv1.Descriptor{{Key: "k"}}}
	if r, err := rules.FromProto(sw); err != nil || r.Algorithm != rules.SlidingWindow {
		t.Errorf("sliding window: %+v, %v", r, err)
	}
	sw.Burst = 2
	if _, err := rules.FromProto(sw); !errors.Is(err, rules.ErrInvalid) {
		t.Errorf("sliding window with burst: %v, want ErrInvalid", err)
	}
}

func TestLiveKeepsTableOnError(t *testing.T) {
	l := rules.NewLive()
	good := &rules.Rule{ID: "a", Domain: "d", Descriptors: e("k", ""), Limit: 1, Window: time.Second}
	if err := l.Update("file", "v1", []*rules.Rule{good}); err != nil {
		t.Fatal(err)
	}
	bad := &rules.Rule{ID: "b", Domain: "d", Descriptors: e("k", "")}
	if err := l.Update("xds", "v2", []*rules.Rule{bad}); !errors.Is(err, rules.ErrInvalid) {
		t.Fatalf("got %v", err)
	}
	tab := l.Load()
	if len(tab.Rules()) != 1 || tab.Versions["file"] != "v1" || tab.Versions["xds"] != "" {
		t.Fatalf("table changed: %v %v", tab.Rules(), tab.Versions)
	}
}

func TestRuleJSON(t *testing.T) {
	b, err := json.Marshal(&rules.Rule{ID: "x", Domain: "d", Window: time.Minute, Algorithm: rules.FixedWindow, Mode: rules.Shadow, FailMode: rules.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"window":"1m0s"`, `"algorithm":"FIXED_WINDOW"`, `"mode":"SHADOW"`, `"failMode":"CLOSED"`, `"id":"x"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
}

// A RateLimitConfig resource compiles to the rules its YAML twin gives.
func TestRateLimitConfigMatchesYAML(t *testing.T) {
	_, fromYAML, err := rules.ParseYAML("m.yaml", []byte(`
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        shadow_mode: true
        rate_limit: {unit: day, requests_per_unit: 5, name: m, replaces: [{name: n}]}
  - key: to_number
    rate_limit: {unit: second, requests_per_unit: 100, name: n}
  - key: vip
    rate_limit: {unlimited: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	fromXDS, err := rules.FromRateLimitConfig(&rlsconfv3.RateLimitConfig{Name: "messaging", Domain: "messaging",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "message_type", Value: "marketing", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "to_number", ShadowMode: true,
				RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_DAY, RequestsPerUnit: 5, Name: "m",
					Replaces: []*rlsconfv3.RateLimitReplace{{Name: "n"}}}}}},
			{Key: "to_number", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 100, Name: "n"}},
			{Key: "vip", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	norm := func(rs []*rules.Rule) string {
		var out []string
		for _, r := range rs {
			c := *r
			c.ID, c.Source = strings.SplitN(c.ID, ":", 2)[1], ""
			b, _ := json.Marshal(&c)
			out = append(out, string(b))
		}
		return strings.Join(out, "\n")
	}
	if a, b := norm(fromYAML), norm(fromXDS); a != b || len(fromXDS) != 3 {
		t.Fatalf("YAML:\n%s\nRateLimitConfig:\n%s", a, b)
	}
	if _, err := rules.FromRateLimitConfig(&rlsconfv3.RateLimitConfig{Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 1}}}}); !errors.Is(err, rules.ErrInvalid) {
		t.Fatalf("UNKNOWN unit: %v", err)
	}
}

// Plain scalars keep their text, as in envoyproxy/ratelimit (yaml.v2).
func TestYAMLScalarsStayStrings(t *testing.T) {
	_, rs, err := rules.ParseYAML("s.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    value: n\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    value: 01\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: c\n    value: yes\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := rules.Build(rs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range [][]rules.Entry{e("a", "n"), e("b", "01"), e("c", "yes")} {
		if tab.Match("d", en, "") == nil {
			t.Errorf("%v does not match", en)
		}
	}
}

// requests_per_unit: 0 is a ban in envoyproxy/ratelimit (its example's
// "banned" limit): it loads; in Portico's own rule proto a zero is refused.
func TestZeroLimitLoadsFromYAML(t *testing.T) {
	_, rs, err := rules.ParseYAML("b.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    value: banned\n    rate_limit: {unit: minute, requests_per_unit: 0}\n"))
	if err != nil || len(rs) != 1 || rs[0].Limit != 0 {
		t.Fatalf("%v %v", rs, err)
	}
}

// remote_address values may be CIDRs: exact address first, then the longest
// matching prefix, then wildcards; IPv4-mapped IPv6 addresses match IPv4
// prefixes; a bad CIDR is refused; other keys never parse CIDRs.
func TestRemoteAddressCIDR(t *testing.T) {
	_, rs, err := rules.ParseYAML("c.yaml", []byte(`
domain: d
descriptors:
  - key: remote_address
    value: 10.0.0.0/8
    rate_limit: {unit: minute, requests_per_unit: 8}
  - key: remote_address
    value: 10.1.0.0/16
    rate_limit: {unit: minute, requests_per_unit: 16}
  - key: remote_address
    value: 10.1.2.3
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: remote_address
    value: 2001:db8::/32
    rate_limit: {unit: minute, requests_per_unit: 32}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: remote_address
    value: 192.168.0.0/16
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: client_ip
    value: 10.0.0.0/8
    rate_limit: {unit: minute, requests_per_unit: 7}
`))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := rules.Build(rs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]uint32{
		"10.9.9.9": 8, "10.1.9.9": 16, "10.1.2.3": 1, "::ffff:10.1.9.9": 16,
		"2001:db8::1": 32, "2001:db9::1": 100, "11.0.0.1": 100, "not-an-ip": 100,
	} {
		r := tab.Match("d", []rules.Entry{{Key: "remote_address", Value: addr}}, "")
		if r == nil || r.Limit != want {
			t.Errorf("%s: %v, want limit %d", addr, r, want)
		}
	}
	if r := tab.Match("d", []rules.Entry{{Key: "remote_address", Value: "192.168.1.1"}, {Key: "path", Value: "/x"}}, ""); r == nil || r.Limit != 5 {
		t.Errorf("nested under a CIDR: %v", r)
	}
	if r := tab.Match("d", []rules.Entry{{Key: "client_ip", Value: "10.0.0.1"}}, ""); r != nil {
		t.Errorf("CIDR matched under another key: %v", r)
	}
	if _, rs, err := rules.ParseYAML("bad.yaml", []byte("domain: d\ndescriptors:\n  - key: remote_address\n    value: 10.0.0.0/33\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")); err == nil {
		if _, err := rules.Build(rs, nil); !errors.Is(err, rules.ErrInvalid) {
			t.Fatalf("bad CIDR: %v", err)
		}
	}
}

// A descriptor declared without rate_limit is matched like any other, so it
// shadows its less specific siblings and the request gets no limit from
// them: envoyproxy/ratelimit's documented whitelist ("If the rate limit is
// not present and there are no nested descriptors, then the descriptor is
// effectively whitelisted"; GetLimit stops at the node it found). An exact
// value beats a prefix wildcard and any value; a wildcard beats any value;
// so does a CIDR under remote_address; and at every depth.
func TestDescriptorWithoutLimitShadowsSiblings(t *testing.T) {
	doc := `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: user
    value: vip
  - key: path
    value: /api*
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /api/health
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: team
    value: a*
  - key: team
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: org
    value: o1
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 6}
      - key: user
        value: vip
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 7}
  - key: remote_address
    value: 10.0.0.0/8
`
	_, fromYAML, err := rules.ParseYAML("w.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	fromXDS, err := rules.FromRateLimitConfig(&rlsconfv3.RateLimitConfig{Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "user", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 2}},
		{Key: "user", Value: "vip"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for name, rs := range map[string][]*rules.Rule{"YAML": fromYAML, "RateLimitConfig": fromXDS} {
		tab, err := rules.Build(rs, nil)
		if err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			entries []rules.Entry
			want    string
		}{
			{e("user", "u1"), "2/1m0s"},
			{e("user", "vip"), ""},
			{e("path", "/api/x"), "3/1m0s"},
			{e("path", "/api/health"), ""},
			{e("path", "/other"), "4/1m0s"},
			{e("team", "abc"), ""},
			{e("team", "b"), "5/1m0s"},
			{e("org", "o1", "user", "u"), "6/1m0s"},
			{e("org", "o1", "user", "vip"), ""},
			{e("remote_address", "10.1.1.1"), ""},
			{e("remote_address", "11.0.0.1"), "7/1m0s"},
		}
		if name == "RateLimitConfig" {
			cases = cases[:2]
		}
		for _, c := range cases {
			got := ""
			if r := tab.Match("d", c.entries, ""); r != nil {
				got = summary(r)
			}
			if got != c.want {
				t.Errorf("%s %v: got %q want %q", name, c.entries, got, c.want)
			}
		}
	}
}

// replaces naming the limit's own name is refused at load, as in
// envoyproxy/ratelimit ("replaces should not contain name of same
// descriptor"), from a file, from a RateLimitConfig, and for a whole
// directory: a bad file changes nothing.
func TestReplacesItselfRefused(t *testing.T) {
	_, _, err := rules.ParseYAML("self.yaml", []byte(`
domain: d
descriptors:
  - key: k
    value: v
    rate_limit: {unit: minute, requests_per_unit: 1, name: lim, replaces: [{name: lim}]}
`))
	if !errors.Is(err, rules.ErrInvalid) || !strings.Contains(err.Error(), `replaces its own name "lim"`) {
		t.Fatalf("file: %v", err)
	}
	_, err = rules.FromRateLimitConfig(&rlsconfv3.RateLimitConfig{Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 1, Name: "lim",
			Replaces: []*rlsconfv3.RateLimitReplace{{Name: "lim"}}}}}})
	if !errors.Is(err, rules.ErrInvalid) {
		t.Fatalf("RateLimitConfig: %v", err)
	}
	dir := t.TempDir()
	for n, doc := range map[string]string{
		"a.yaml": "domain: a\ndescriptors: [{key: k, rate_limit: {unit: minute, requests_per_unit: 1}}]\n",
		"b.yaml": "domain: b\ndescriptors: [{key: k, rate_limit: {unit: minute, requests_per_unit: 1, name: x, replaces: [{name: x}]}}]\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if rs, _, err := rules.LoadDir(dir); !errors.Is(err, rules.ErrInvalid) || rs != nil {
		t.Fatalf("directory: %v, %v", rs, err)
	}
}
