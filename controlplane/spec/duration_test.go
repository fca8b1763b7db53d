package spec

import (
	"encoding/json"
	"testing"
	"time"
)

func TestDurationRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		out  string
	}{
		{"1s", time.Second, "1s"},
		{"250ms", 250 * time.Millisecond, "250ms"},
		{"5m", 5 * time.Minute, "5m0s"},
		{"1d", 24 * time.Hour, "1d"},
		{"48h", 48 * time.Hour, "2d"},
	} {
		var d Duration
		if err := json.Unmarshal([]byte(`"`+tc.in+`"`), &d); err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if d.D() != tc.want {
			t.Errorf("%s: got %v want %v", tc.in, d.D(), tc.want)
		}
		b, _ := json.Marshal(d)
		if string(b) != `"`+tc.out+`"` {
			t.Errorf("%s: marshal %s want %q", tc.in, b, tc.out)
		}
	}
	for _, bad := range []string{`"x"`, `"d"`, `"-1d"`, `5`, `"1.5d"`} {
		var d Duration
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
