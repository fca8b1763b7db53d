package spec

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Duration is a time.Duration that reads and writes as a string ("250ms",
// "5m", "1d"). The "d" suffix (24h) is accepted for rate-limit windows.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// ParseDuration parses Go duration syntax plus a whole-number "Nd" form.
func ParseDuration(s string) (Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok && n != "" {
		days, err := strconv.ParseUint(n, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		return Duration(time.Duration(days) * 24 * time.Hour), nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q", s)
	}
	return Duration(v), nil
}

// MarshalJSON writes the canonical string form.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(d.String())
}

// String is time.Duration's form, except whole days print as "Nd".
func (d Duration) String() string {
	v := time.Duration(d)
	if v > 0 && v%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(v/(24*time.Hour)), 10) + "d"
	}
	return v.String()
}

// UnmarshalJSON accepts a duration string. A bad value is reported as a
// *json.UnmarshalTypeError, to which encoding/json adds the field's path,
// so that validation errors can name it.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &json.UnmarshalTypeError{Value: "non-string", Type: durationType}
	}
	v, err := ParseDuration(s)
	if err != nil {
		return &json.UnmarshalTypeError{Value: "string " + strconv.Quote(s), Type: durationType}
	}
	*d = v
	return nil
}

var durationType = reflect.TypeFor[Duration]()
