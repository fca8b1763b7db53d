package xdscontract

import "testing"

// The type URLs are what the wire has always carried: a client or control
// plane of an earlier release must keep understanding them.
func TestTypeURLsAreStable(t *testing.T) {
	for got, want := range map[string]string{
		JwtProviderType:    "type.googleapis.com/portico.auth.v1.JwtProvider",
		ApiKeyShardType:    "type.googleapis.com/portico.auth.v1.ApiKeyShard",
		RevocationListType: "type.googleapis.com/portico.auth.v1.RevocationList",
		RateLimitRuleType:  "type.googleapis.com/portico.ratelimit.v1.RateLimitRule",
	} {
		if got != want {
			t.Errorf("type URL %q, want %q", got, want)
		}
	}
}
