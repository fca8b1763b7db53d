package spec_test

import (
	"errors"
	"testing"

	"github.com/portico-io/portico/controlplane/spec"
)

func TestListenerPreAuthLimitValidation(t *testing.T) {
	const l = `{"name":"edge","port":8443,"preAuthLimit":`
	cases := []struct {
		name  string
		body  string
		field string // "" = valid
		code  string
	}{
		{"absent", `{"name":"edge","port":8443}`, "", ""},
		{"rate only", l + `{"requestsPerSecond":20}}`, "", ""},
		{"rate and burst", l + `{"requestsPerSecond":20,"burst":50}}`, "", ""},
		{"disabled", l + `{"disabled":true}}`, "", ""},
		{"largest", l + `{"requestsPerSecond":1000000,"burst":1000000}}`, "", ""},
		{"empty", l + `{}}`, "preAuthLimit.requestsPerSecond", spec.CodeRequired},
		{"zero rate", l + `{"requestsPerSecond":0,"burst":5}}`, "preAuthLimit.requestsPerSecond", spec.CodeRequired},
		{"rate too high", l + `{"requestsPerSecond":1000001}}`, "preAuthLimit.requestsPerSecond", spec.CodeInvalid},
		{"burst below rate", l + `{"requestsPerSecond":20,"burst":10}}`, "preAuthLimit.burst", spec.CodeInvalid},
		{"burst too high", l + `{"requestsPerSecond":20,"burst":1000001}}`, "preAuthLimit.burst", spec.CodeInvalid},
		{"disabled with a rate", l + `{"disabled":true,"requestsPerSecond":20}}`, "preAuthLimit.disabled", spec.CodeInvalid},
		{"negative rate", l + `{"requestsPerSecond":-1}}`, "preAuthLimit.requestsPerSecond", spec.CodeInvalid},
		{"fractional rate", l + `{"requestsPerSecond":1.5}}`, "preAuthLimit.requestsPerSecond", spec.CodeInvalid},
		{"unknown field", l + `{"requestsPerSecond":20,"perPath":true}}`, "perPath", spec.CodeInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := spec.Decode(spec.KindListener, []byte(tc.body))
			if tc.field == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				if _, ok := r.(*spec.Listener); !ok {
					t.Fatalf("decoded %T", r)
				}
				return
			}
			var fe *spec.FieldError
			if !errors.As(err, &fe) || !errors.Is(err, spec.ErrInvalid) {
				t.Fatalf("want a FieldError, got %v", err)
			}
			if fe.Field != tc.field || fe.Code != tc.code {
				t.Fatalf("got field %q code %q (%v), want field %q code %q", fe.Field, fe.Code, fe, tc.field, tc.code)
			}
		})
	}
}

// TestPreAuthLimitEffective: burst defaults to the rate; the zero value is
// "not configured", which callers resolve to their default.
func TestPreAuthLimitEffective(t *testing.T) {
	for _, tc := range []struct {
		in         spec.PreAuthLimit
		rps, burst uint32
		on         bool
	}{
		{spec.PreAuthLimit{RequestsPerSecond: 20}, 20, 20, true},
		{spec.PreAuthLimit{RequestsPerSecond: 20, Burst: 40}, 20, 40, true},
		{spec.PreAuthLimit{Disabled: true}, 0, 0, false},
	} {
		rps, burst, on := tc.in.Effective()
		if rps != tc.rps || burst != tc.burst || on != tc.on {
			t.Fatalf("%+v: got %d/%d/%v, want %d/%d/%v", tc.in, rps, burst, on, tc.rps, tc.burst, tc.on)
		}
	}
}
