package authz

import "errors"

// ErrNoPolicy means Check was called before any policy was loaded.
var ErrNoPolicy = errors.New("authz: no policy loaded")

// Reason codes: the stable "code" of a denial body and the bounded "reason"
// label of portico_extauthz_checks_total.
const (
	ReasonOK                       = "ok"
	ReasonNoAuth                   = "no_auth"
	ReasonMissingCredentials       = "missing_credentials"
	ReasonMalformedToken           = "malformed_token"
	ReasonUnsupportedAlg           = "unsupported_alg"
	ReasonUnknownKID               = "unknown_kid"
	ReasonBadSignature             = "bad_signature"
	ReasonWrongIssuer              = "wrong_issuer"
	ReasonWrongAudience            = "wrong_audience"
	ReasonExpired                  = "token_expired"
	ReasonNotYetValid              = "token_not_yet_valid"
	ReasonRevoked                  = "token_revoked"
	ReasonInvalidAPIKey            = "invalid_api_key"
	ReasonExpiredAPIKey            = "api_key_expired"
	ReasonInsufficientScope        = "insufficient_scope"
	ReasonJWKSUnavailable          = "jwks_unavailable"
	ReasonInactive                 = "token_inactive"
	ReasonIntrospectionDown        = "introspection_unavailable"
	ReasonIntrospectionRateLimited = "introspection_rate_limited"
	ReasonUnknownProvider          = "unknown_provider"
	ReasonBadRoute                 = "bad_route_config"
	ReasonNoPolicy                 = "policy_unavailable"
	ReasonInternal                 = "internal"
)
