package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/internal/pgtokens"
)

// Tenant API tokens: /v1/tokens. An admin mints a token bound to one
// tenant (viewer: read its jobs; editor: change them too); whoever holds it
// acts for that tenant only (access.go). The token is shown once, in the
// creation answer; only its SHA-256 is stored; revocation is in force on
// the next request. Tenant-bound callers cannot reach these routes at all
// (security.* is never a tenant's permission).

// TokenTable is the token storage the API needs (pgtokens.Table).
type TokenTable interface {
	Create(ctx context.Context, t pgtokens.Token, hash [32]byte) (pgtokens.Token, error)
	Get(ctx context.Context, id string) (pgtokens.Token, error)
	List(ctx context.Context, f pgtokens.Filter, after string, limit int) ([]pgtokens.Token, string, error)
	Revoke(ctx context.Context, id, by string) (pgtokens.Token, error)
}

var _ TokenTable = (*pgtokens.Table)(nil)

// tenantRoles are the roles a tenant token may hold: within a tenant,
// viewer reads and editor also writes (authz confines both to jobs.*).
var tenantRoles = []string{string(authz.Viewer), string(authz.Editor)}

func (a *API) tokenRoutes() {
	a.handle("POST /v1/tokens", authz.SecurityWrite, a.createToken)
	a.handle("GET /v1/tokens", authz.SecurityRead, a.listTokens)
	a.handle("GET /v1/tokens/{id}", authz.SecurityRead, a.getToken)
	a.handle("DELETE /v1/tokens/{id}", authz.SecurityWrite, a.revokeToken)
}

type tokenRequest struct {
	Name      string     `json:"name"`
	Tenant    string     `json:"tenant"`
	Roles     []string   `json:"roles"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// createdToken is a token with its secret: the creation answer only.
type createdToken struct {
	pgtokens.Token
	Secret string `json:"token"`
}

var errNoToken = &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no such token"}

func (a *API) createToken(w http.ResponseWriter, r *http.Request) error {
	var req tokenRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return mb
		}
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalid, Message: "body: " + err.Error()}
	}
	caller, _ := authn.FromContext(r.Context())
	if err := checkTokenRequest(req, caller, time.Now()); err != nil {
		return err
	}
	// Minting a tenant's credential is acting for that tenant.
	var err error
	if req.Tenant, err = actingTenant(r, req.Tenant); err != nil {
		return err
	}
	issued := authn.NewToken()
	t, err := a.cfg.Tokens.Create(r.Context(), pgtokens.Token{ID: issued.ID, Name: req.Name, Roles: req.Roles, Tenant: req.Tenant,
		CreatedBy: caller.Author(), ExpiresAt: req.ExpiresAt}, issued.Hash)
	if err != nil {
		return err
	}
	a.cfg.Logger.Info("api: tenant token created", "id", t.ID, "name", t.Name, "tenant", t.Tenant, "roles", t.Roles, "by", t.CreatedBy)
	w.Header().Set("Location", "/v1/tokens/"+t.ID)
	return writeJSON(w, http.StatusCreated, createdToken{Token: t, Secret: issued.Plaintext})
}

// checkTokenRequest validates a token request: a name, tenant roles the
// caller could hold itself (no escalation), an expiry within a year.
func checkTokenRequest(req tokenRequest, caller authn.Principal, now time.Time) error {
	field := func(f string, err error) error {
		return &Error{Status: http.StatusUnprocessableEntity, Code: CodeInvalid, Field: f, Message: err.Error()}
	}
	if err := authn.CheckTokenName(req.Name); err != nil {
		return field("name", err)
	}
	if len(req.Tenant) > 128 {
		return field("tenant", errors.New("at most 128 bytes"))
	}
	if len(req.Roles) == 0 {
		return field("roles", errors.New("viewer or editor"))
	}
	for _, role := range req.Roles {
		if !slices.Contains(tenantRoles, role) {
			return field("roles", fmt.Errorf("a tenant token is viewer or editor, not %q", role))
		}
	}
	if err := authz.CheckGrant(caller, req.Roles); err != nil {
		return &Error{Status: http.StatusForbidden, Code: authz.ResultForbidden, Field: "roles", Message: err.Error()}
	}
	if req.ExpiresAt != nil {
		if err := authn.CheckTokenExpiry(*req.ExpiresAt, now); err != nil {
			return field("expiresAt", err)
		}
	}
	return nil
}

func (a *API) listTokens(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit := DefaultPageSize
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxPageSize {
			return badParam("limit", "must be 1..200")
		}
		limit = n
	}
	items, next, err := a.cfg.Tokens.List(r.Context(), pgtokens.Filter{Tenant: q.Get("tenant")}, q.Get("cursor"), limit)
	if err != nil {
		return err
	}
	if items == nil {
		items = []pgtokens.Token{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"items": items, "nextCursor": next})
}

func (a *API) getToken(w http.ResponseWriter, r *http.Request) error {
	t, err := a.cfg.Tokens.Get(r.Context(), r.PathValue("id"))
	if errors.Is(err, pgtokens.ErrNotFound) {
		return errNoToken
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, t)
}

func (a *API) revokeToken(w http.ResponseWriter, r *http.Request) error {
	caller, _ := authn.FromContext(r.Context())
	t, err := a.cfg.Tokens.Revoke(r.Context(), r.PathValue("id"), caller.Author())
	if errors.Is(err, pgtokens.ErrNotFound) {
		return errNoToken
	}
	if err != nil {
		return err
	}
	a.cfg.Logger.Info("api: token revoked", "id", t.ID, "name", t.Name, "tenant", t.Tenant, "by", t.RevokedBy)
	return writeJSON(w, http.StatusOK, t)
}
