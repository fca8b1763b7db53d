package scheduler

import (
	"fmt"
	"log/slog"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
)

// newAuthenticator is who may call the REST API: the bootstrap admin token
// (from tokenFile, when set), the IdP's JWTs (jwt, when set) and operator
// certificates. Tenant-bound API tokens come with a token table later;
// until then tenants are bound by the IdP's tenant claim.
func newAuthenticator(tokenFile string, jwt *authn.JWTConfig, log *slog.Logger) (*authn.Authenticator, error) {
	cfg := authn.Config{JWT: jwt, Logger: log}
	if tokenFile != "" {
		tok, _, err := authn.BootstrapToken(tokenFile)
		if err != nil {
			return nil, fmt.Errorf("scheduler: admin token: %w", err)
		}
		if cfg.Tokens, err = authn.NewStaticTokens(authn.StoredToken{ID: tok.ID, Hash: tok.Hash, Name: "bootstrap-admin",
			Roles: []string{string(authz.Admin)}}); err != nil {
			return nil, fmt.Errorf("scheduler: admin token: %w", err)
		}
	}
	return authn.New(cfg)
}
