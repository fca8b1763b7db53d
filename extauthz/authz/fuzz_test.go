package authz_test

import (
	"context"
	"strings"
	"testing"
)

// FuzzCheck feeds arbitrary Authorization / x-api-key headers to JWT and
// API-key routes: Check must never panic, never return an error, and never
// allow unless the input carries the one valid credential verbatim.
func FuzzCheck(f *testing.F) {
	fx := newFixture(f)
	valid := rs256(f, fx.claims(nil))
	forged := sign(f, map[string]any{"alg": "RS256", "kid": "k1"}, fx.claims(nil), rsaKey2)
	for _, s := range []string{
		"", "Bearer", "Bearer ", "Bearer " + forged, "bearer " + forged + " ", "Bearer a.b.c", "Bearer ..",
		"Bearer eyJhbGciOiJub25lIn0.e30.", "Bearer eyJhbGciOiJIUzI1NiJ9.e30.AAAA", "ApiKey ", "ApiKey x", "Basic Zm9vOmJhcg==",
		"Bearer " + strings.Repeat("A", 20000), "Bearer e30.e30.e30", "Bearer eyJ.eyJ.", "\x00\xff",
	} {
		f.Add(s, "", uint8(0))
		f.Add(s, s, uint8(1))
	}
	f.Fuzz(func(t *testing.T, authzHdr, apiKey string, mode uint8) {
		m := []string{"jwt", "apikey", "none", ""}[mode%4]
		hdrs := map[string]string{}
		if authzHdr != "" {
			hdrs["authorization"] = authzHdr
		}
		if apiKey != "" {
			hdrs["x-api-key"] = apiKey
		}
		resp, err := fx.srv.Check(context.Background(), checkReq(m, "idp", "", hdrs))
		if err != nil || resp == nil {
			t.Fatalf("Check: %v %v", resp, err)
		}
		allowed := resp.GetOkResponse() != nil
		legit := m == "none" || strings.Contains(authzHdr, valid) || strings.Contains(authzHdr+apiKey, apiSecret)
		if allowed && !legit {
			t.Fatalf("allowed %q / %q on a %q route", authzHdr, apiKey, m)
		}
		if d := resp.GetDeniedResponse(); d != nil && authzHdr != "" && len(authzHdr) > 8 && strings.Contains(d.GetBody(), authzHdr) {
			t.Fatal("credential echoed in the deny body")
		}
	})
}
