package authn

import "errors"

// Authentication failures. The HTTP edge maps ErrUnavailable to 503 and
// every other one to 401; none of their messages ever carries a secret.
var (
	// ErrNoCredentials means the request carries neither an Authorization
	// header nor a verified client certificate.
	ErrNoCredentials = errors.New("authn: no credentials")
	// ErrMalformed is an Authorization header or token that does not parse:
	// several headers, another scheme, characters outside RFC 6750's
	// token68, an oversized value, a ptk_ token of the wrong shape.
	ErrMalformed = errors.New("authn: malformed credentials")
	// ErrInvalidToken is a well-formed token that does not verify: unknown
	// id, wrong secret, bad signature, algorithm not pinned, wrong issuer or
	// audience, or a JWT while none are accepted.
	ErrInvalidToken = errors.New("authn: invalid token")
	// ErrExpired is a token past its expiry (for a JWT, exp plus leeway).
	ErrExpired = errors.New("authn: token expired")
	// ErrRevoked is a revoked API token.
	ErrRevoked = errors.New("authn: token revoked")
	// ErrBadCertificate is a verified client certificate that carries no
	// usable Portico identity, or one of another trust domain.
	ErrBadCertificate = errors.New("authn: bad client certificate")
	// ErrUnavailable means the credential could not be checked: the token
	// store or the identity provider's key set could not be reached.
	ErrUnavailable = errors.New("authn: credential check unavailable")
	// ErrTokenNotFound is what a TokenStore returns for an unknown token id.
	ErrTokenNotFound = errors.New("authn: token not found")
	// ErrConfig is a bad Config.
	ErrConfig = errors.New("authn: bad config")
	// ErrInvalidKeyspace is a name that cannot be a kvnode keyspace
	// (CheckKeyspace); a JWT confining its holder to one is refused.
	ErrInvalidKeyspace = errors.New("authn: invalid keyspace")
	// ErrBadTokenRequest is a request to mint an API token that no API
	// accepts: a blank or overlong name, an expiry in the past or too far
	// ahead (CheckTokenName, CheckTokenExpiry).
	ErrBadTokenRequest = errors.New("authn: bad token request")
)
