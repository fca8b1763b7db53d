package scheduler

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/scheduler/store"
)

// newAuthenticator is who may call the REST API: tokens of the store's
// table (tenants' tokens, minted under /v1/tokens, and the bootstrap admin
// token from tokenFile, registered there when set), the IdP's JWTs (jwt,
// when set; its tenant claim binds a JWT to a tenant) and operator
// certificates.
func newAuthenticator(ctx context.Context, st *store.Store, tokenFile string, jwt *authn.JWTConfig, log *slog.Logger) (*authn.Authenticator, error) {
	if tokenFile != "" {
		tok, created, stored, err := st.Tokens().Bootstrap(ctx, tokenFile)
		if err != nil {
			return nil, fmt.Errorf("scheduler: admin token: %w", err)
		}
		if created {
			log.Warn("scheduler: created the bootstrap admin token file", "file", tokenFile)
		}
		if stored {
			log.Info("scheduler: bootstrap admin token registered", "id", tok.ID, "file", tokenFile)
		}
	}
	return authn.New(authn.Config{JWT: jwt, Tokens: st.Tokens(), Logger: log})
}
