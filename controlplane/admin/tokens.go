package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/portico-io/portico/controlplane/store"
	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
)

// tokenRoutes serves /admin/v1/tokens: operator API tokens. A token is
// shown once, in the creation answer; only its SHA-256 is stored.
// Revocation is in force on the next request.
func (h *Handler) tokenRoutes() {
	base := Prefix + "/tokens"
	h.Handle("GET "+base, authz.SecurityRead, h.listTokens)
	h.Handle("POST "+base, authz.SecurityWrite, h.createToken)
	h.Handle("GET "+base+"/{id}", authz.SecurityRead, h.getToken)
	h.Handle("DELETE "+base+"/{id}", authz.SecurityWrite, h.revokeToken)
}

type tokenRequest struct {
	Name      string     `json:"name"`
	Roles     []string   `json:"roles"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// createdToken is a token with its secret, in the creation answer only.
type createdToken struct {
	store.Token
	Secret string `json:"token"`
}

func (h *Handler) createToken(w http.ResponseWriter, r *http.Request) error {
	body, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	var req tokenRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return &Error{Status: http.StatusBadRequest, Code: CodeMalformedJSON, Message: "body: " + err.Error()}
	}
	caller, _ := authn.FromContext(r.Context())
	if err := h.checkTokenRequest(req, caller); err != nil {
		return err
	}
	issued := authn.NewToken()
	t, err := h.store.CreateToken(r.Context(), store.Token{ID: issued.ID, Name: req.Name, Roles: req.Roles,
		CreatedBy: caller.Author(), ExpiresAt: req.ExpiresAt}, issued.Hash)
	if err != nil {
		return err
	}
	h.log.Info("admin: API token created", "id", t.ID, "name", t.Name, "roles", t.Roles, "by", t.CreatedBy)
	w.Header().Set("Location", Prefix+"/tokens/"+t.ID)
	writeJSON(w, http.StatusCreated, createdToken{Token: t, Secret: issued.Plaintext})
	return nil
}

// checkTokenRequest validates a token request; a caller may only grant
// roles whose every permission it holds itself, so a security-admin cannot
// mint an admin token.
func (h *Handler) checkTokenRequest(req tokenRequest, caller authn.Principal) error {
	field := func(f, msg string) error {
		return &Error{Status: http.StatusUnprocessableEntity, Code: "invalid", Field: f, Message: msg}
	}
	if err := authn.CheckTokenName(req.Name); err != nil {
		return field("name", err.Error())
	}
	if len(req.Roles) == 0 {
		return field("roles", "at least one of viewer, editor, security-admin, admin")
	}
	if err := authz.CheckGrant(caller, req.Roles); errors.Is(err, authz.ErrForbidden) {
		return &Error{Status: http.StatusForbidden, Code: authz.ResultForbidden, Field: "roles", Message: err.Error()}
	} else if err != nil {
		return field("roles", err.Error())
	}
	if req.ExpiresAt != nil {
		if err := authn.CheckTokenExpiry(*req.ExpiresAt, h.timeNow()); err != nil {
			return field("expiresAt", err.Error())
		}
	}
	return nil
}

func (h *Handler) listTokens(w http.ResponseWriter, r *http.Request) error {
	cursor, limit, err := page(r)
	if err != nil {
		return err
	}
	items, next, err := h.store.ListTokens(r.Context(), cursor, limit)
	if err != nil {
		return err
	}
	if items == nil {
		items = []store.Token{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "nextCursor": next})
	return nil
}

func (h *Handler) getToken(w http.ResponseWriter, r *http.Request) error {
	t, err := h.store.GetToken(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

func (h *Handler) revokeToken(w http.ResponseWriter, r *http.Request) error {
	caller, _ := authn.FromContext(r.Context())
	t, err := h.store.RevokeToken(r.Context(), r.PathValue("id"), caller.Author())
	if errors.Is(err, store.ErrNotFound) {
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no such token"}
	}
	if err != nil {
		return err
	}
	h.log.Info("admin: API token revoked", "id", t.ID, "name", t.Name, "by", t.RevokedBy)
	writeJSON(w, http.StatusOK, t)
	return nil
}
