package authn

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/portico-io/portico/extauthz/token"
)

// MaxBearerLen bounds the credential of an Authorization header: large
// enough for an IdP's JWT with many groups, small enough that a client
// cannot make the server hash or parse megabytes.
const MaxBearerLen = token.MaxLen

// ParseBearer returns the credential of the request's one
// "Authorization: Bearer <token>" header (RFC 6750 §2.1).
//
// It is strict: exactly one Authorization header, the scheme "Bearer" in any
// case, one space, then a b64token (ALPHA / DIGIT / "-" / "." / "_" / "~" /
// "+" / "/" followed by optional "=" padding) of at most MaxBearerLen bytes.
// Anything else is ErrMalformed; no header at all is ErrNoCredentials.
func ParseBearer(h http.Header) (string, error) {
	vals := h.Values("Authorization")
	switch len(vals) {
	case 0:
		return "", ErrNoCredentials
	case 1:
	default:
		return "", fmt.Errorf("%w: %d Authorization headers", ErrMalformed, len(vals))
	}
	v := vals[0]
	const scheme = "bearer "
	if len(v) < len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) {
		return "", fmt.Errorf("%w: not a Bearer authorization", ErrMalformed)
	}
	tok := v[len(scheme):]
	if len(tok) == 0 || len(tok) > MaxBearerLen {
		return "", fmt.Errorf("%w: bearer token length %d (want 1..%d)", ErrMalformed, len(tok), MaxBearerLen)
	}
	if !isB64Token(tok) {
		return "", fmt.Errorf("%w: bearer token has characters outside RFC 6750 b64token", ErrMalformed)
	}
	return tok, nil
}

// isB64Token reports whether s is 1*( ALPHA / DIGIT / "-" / "." / "_" / "~"
// / "+" / "/" ) *"=".
func isB64Token(s string) bool {
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		if ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') ||
			c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/' {
			continue
		}
		break
	}
	if i == 0 {
		return false
	}
	for ; i < len(s); i++ {
		if s[i] != '=' {
			return false
		}
	}
	return true
}
