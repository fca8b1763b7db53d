package identity

import (
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]ID{
		"spiffe://portico.local/gateway/gw-0":     {TrustDomain: "portico.local", Role: Gateway, Name: "gw-0"},
		"spiffe://example.org/kvnode/kvnode-2":    {TrustDomain: "example.org", Role: KVNode, Name: "kvnode-2"},
		"spiffe://portico.local/operator/alice_1": {TrustDomain: "portico.local", Role: Operator, Name: "alice_1"},
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if got.String() != in || got.URI().String() != in {
			t.Errorf("%q does not round-trip: %s, %s", in, got, got.URI())
		}
	}
	for _, bad := range []string{
		"", "https://portico.local/gateway/x", "spiffe://portico.local/gateway",
		"spiffe://portico.local/gateway/x/y", "spiffe://portico.local/root/x",
		"spiffe://Portico.Local/gateway/x", "spiffe://portico.local/gateway/",
		"spiffe:///gateway/x", "spiffe://portico.local/gateway/x?q=1",
	} {
		if id, err := Parse(bad); !errors.Is(err, ErrBadID) {
			t.Errorf("Parse(%q) = %+v, %v; want ErrBadID", bad, id, err)
		}
	}
}

func TestPolicyAllow(t *testing.T) {
	gw := ID{TrustDomain: DefaultTrustDomain, Role: Gateway, Name: "g"}
	for _, tc := range []struct {
		p    Policy
		id   ID
		want bool
	}{
		{Policy{}, gw, true},
		{Policy{Roles: []Role{Gateway}}, gw, true},
		{Policy{Roles: []Role{ExtAuthz, RateLimit}}, gw, false},
		{Policy{TrustDomain: "other.test"}, gw, false},
		{Policy{}, ID{TrustDomain: "other.test", Role: Gateway, Name: "g"}, false},
	} {
		err := tc.p.Allow(tc.id)
		if (err == nil) != tc.want || (err != nil && !errors.Is(err, ErrForbidden)) {
			t.Errorf("%+v.Allow(%s) = %v, want allowed=%v", tc.p, tc.id, err, tc.want)
		}
	}
}
