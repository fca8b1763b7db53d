package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/kvnode/apitoken"
	"github.com/portico-io/portico/kvnode/cp"
)

// Tokens is kvnode's API token table as the admin routes use it;
// *apitoken.Store is one. Create and Revoke run on the Raft leader
// (*cp.NotLeaderError elsewhere) and return the revision they were written
// at; Get and List read this node's applied state.
type Tokens interface {
	Create(ctx context.Context, t apitoken.Token, hash [sha256.Size]byte) (apitoken.Token, uint64, error)
	Revoke(ctx context.Context, id, by string) (apitoken.Token, uint64, error)
	Get(id string) (apitoken.Token, error)
	List(after string, limit int) ([]apitoken.Token, string, error)
	WaitApplied(ctx context.Context, rev uint64) error
}

var _ Tokens = (*apitoken.Store)(nil)

// TokensPrefix is where the token routes live.
const TokensPrefix = "/admin/v1/tokens"

// tokenHandler serves /admin/v1/tokens: API tokens kept in the consensus
// tier (kvnode/apitoken), the control plane's token API plus keyspaces.
//
// A token is shown once, in the creation answer. A follower forwards
// creations and revocations to the leader and, before answering, waits
// until it has applied the leader's write: on the node that answered, a
// revocation (or a new token) is in force on the next request; on every
// other node, once it has applied that Raft entry. Reads answer from this
// node's applied state: what it enforces.
type tokenHandler struct {
	t Tokens
	// fwd forwards to the leader; nil when the node has no consensus tier.
	fwd *cpHandler
	now func() time.Time
}

func mountTokens(rt *routeTable, h *tokenHandler) {
	rt.handle("GET "+TokensPrefix, authz.SecurityRead, h.serve(h.list))
	rt.handle("POST "+TokensPrefix, authz.SecurityWrite, h.serve(h.create))
	rt.handle("GET "+TokensPrefix+"/{id}", authz.SecurityRead, h.serve(h.get))
	rt.handle("DELETE "+TokensPrefix+"/{id}", authz.SecurityWrite, h.serve(h.revoke))
}

// serve answers 501 on a node without the consensus tier.
func (h *tokenHandler) serve(fn http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.t == nil || h.fwd == nil {
			writeError(w, http.StatusNotImplemented, "not_implemented", "API tokens are kept by the consensus tier, which is not available on this node", "")
			return
		}
		fn(w, r)
	}
}

// TokenRequest is the body of POST /admin/v1/tokens.
type TokenRequest struct {
	Name  string   `json:"name"`
	Roles []string `json:"roles"`
	// Keyspaces confine the token (it then holds only kv.* there); none:
	// an operator token limited by its roles alone.
	Keyspaces []string   `json:"keyspaces,omitempty"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// CreatedToken is the creation answer: the token's metadata and, this
// once, the token itself.
type CreatedToken struct {
	apitoken.Token
	Secret string `json:"token"`
}

// maxTokenBody bounds a token request body.
const maxTokenBody = 64 << 10

// ParseTokenRequest validates a creation body for caller at now: known
// fields only; a name (authn.CheckTokenName); at least one role, each one
// caller may grant (authz.CheckGrant: 403 otherwise, so a security-admin
// cannot mint an admin token); keyspaces that are valid and not reserved
// (ParseKeyspace), returned sorted and without duplicates (an empty list
// is refused: leave the field out for an unconfined token); an expiry in
// the future within authn.MaxTokenTTL.
func ParseTokenRequest(body []byte, caller authn.Principal, now time.Time) (TokenRequest, error) {
	var req TokenRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, &BadRequest{http.StatusBadRequest, "invalid_body", "body", "body: " + err.Error()}
	}
	if err := authn.CheckTokenName(req.Name); err != nil {
		return req, &BadRequest{http.StatusBadRequest, "invalid_name", "name", fmt.Sprintf("name is required, at most %d bytes", authn.MaxTokenNameLen)}
	}
	if len(req.Roles) == 0 {
		return req, &BadRequest{http.StatusBadRequest, "invalid_roles", "roles", "at least one of viewer, editor, security-admin, admin"}
	}
	if err := authz.CheckGrant(caller, req.Roles); errors.Is(err, authz.ErrForbidden) {
		return req, &BadRequest{http.StatusForbidden, authz.ResultForbidden, "roles", err.Error()}
	} else if err != nil {
		return req, &BadRequest{http.StatusBadRequest, "invalid_roles", "roles", err.Error()}
	}
	if req.Keyspaces != nil && len(req.Keyspaces) == 0 {
		// An empty list would read as "no restriction".
		return req, &BadRequest{http.StatusBadRequest, "invalid_keyspace", "keyspaces", "name at least one keyspace, or leave keyspaces out for a token its roles alone limit"}
	}
	var ks []string
	for i, k := range req.Keyspaces {
		if _, err := ParseKeyspace(k); err != nil {
			var br *BadRequest
			if !errors.As(err, &br) {
				return req, err // ParseKeyspace's errors are all *BadRequest
			}
			return req, &BadRequest{http.StatusBadRequest, "invalid_keyspace", fmt.Sprintf("keyspaces[%d]", i), br.Message}
		}
		if !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	req.Keyspaces = ks
	if req.ExpiresAt != nil {
		if err := authn.CheckTokenExpiry(*req.ExpiresAt, now); err != nil {
			return req, &BadRequest{http.StatusBadRequest, "invalid_expires_at", "expiresAt",
				fmt.Sprintf("expiresAt must be in the future, at most %d days ahead", authn.MaxTokenTTL/(24*time.Hour))}
		}
		at := req.ExpiresAt.UTC()
		req.ExpiresAt = &at
	}
	return req, nil
}

func (h *tokenHandler) create(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxTokenBody+1))
	if err != nil || len(body) > maxTokenBody {
		writeErr(w, &BadRequest{http.StatusBadRequest, "invalid_body", "body", fmt.Sprintf("a JSON body of at most %d bytes", maxTokenBody)})
		return
	}
	caller, _ := authn.FromContext(r.Context())
	req, err := ParseTokenRequest(body, caller, h.now())
	if err != nil {
		writeErr(w, err)
		return
	}
	issued := authn.NewToken()
	t, rev, err := h.t.Create(r.Context(), apitoken.Token{ID: issued.ID, Name: req.Name, Roles: req.Roles, Keyspaces: req.Keyspaces,
		CreatedAt: h.now().UTC(), CreatedBy: author(r), ExpiresAt: req.ExpiresAt}, issued.Hash)
	if err != nil {
		// The secret of a forwarded creation is the leader's, relayed
		// whether or not this node has applied it yet (it would be lost
		// otherwise); it works here once this node has.
		h.fail(w, r, body, err, false)
		return
	}
	w.Header().Set(HeaderRevision, strconv.FormatUint(rev, 10))
	w.Header().Set("Location", TokensPrefix+"/"+t.ID)
	writeJSON(w, http.StatusCreated, CreatedToken{Token: t, Secret: issued.Plaintext})
}

func (h *tokenHandler) revoke(w http.ResponseWriter, r *http.Request) {
	id, ok := tokenID(w, r)
	if !ok {
		return
	}
	t, rev, err := h.t.Revoke(r.Context(), id, author(r))
	if err != nil {
		h.fail(w, r, nil, err, true)
		return
	}
	w.Header().Set(HeaderRevision, strconv.FormatUint(rev, 10))
	writeJSON(w, http.StatusOK, t)
}

func (h *tokenHandler) get(w http.ResponseWriter, r *http.Request) {
	id, ok := tokenID(w, r)
	if !ok {
		return
	}
	t, err := h.t.Get(id)
	if err != nil {
		h.fail(w, r, nil, err, false)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

// TokenList is the answer of GET /admin/v1/tokens?cursor=…&limit=….
type TokenList struct {
	Items      []apitoken.Token `json:"items"`
	NextCursor string           `json:"nextCursor"`
}

func (h *tokenHandler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeErr(w, &BadRequest{http.StatusBadRequest, "invalid_limit", "limit", "limit must be a positive integer"})
			return
		}
		limit = n
	}
	items, next, err := h.t.List(q.Get("cursor"), limit)
	if err != nil {
		h.fail(w, r, nil, err, false)
		return
	}
	writeJSON(w, http.StatusOK, TokenList{Items: items, NextCursor: next})
}

// author is who a token write is recorded as made by: the caller; for a
// write a follower forwarded for a caller that authenticated with a
// certificate (here the follower's kvnode certificate stands in for it),
// "<the caller the follower names> via <the follower>". Only a kvnode
// certificate may name another caller, and it names only the author.
func author(r *http.Request) string {
	p, _ := authn.FromContext(r.Context())
	if v := r.Header.Get(HeaderOnBehalfOf); v != "" && r.Header.Get(HeaderForwarded) != "" && p.Kind == authn.KindCert {
		if id, err := identity.Parse(p.ID); err == nil && id.Role == identity.KVNode {
			return v + " via " + p.Author()
		}
	}
	return p.Author()
}

// tokenID validates the {id} path segment: a token id is 16 lowercase hex
// characters; anything else is no token (404).
func tokenID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	ok := len(id) == 16
	for i := 0; ok && i < len(id); i++ {
		ok = '0' <= id[i] && id[i] <= '9' || 'a' <= id[i] && id[i] <= 'f'
	}
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "no such token", "id")
	}
	return id, ok
}

// applyWait bounds how long a node that forwarded a token write waits to
// apply it.
const applyWait = 5 * time.Second

// fail answers a store error; on a follower a write goes to the leader
// (body is what it reads), and the answer waits until this node has applied
// the leader's revision, which a revocation requires (mustApply: 503 when
// it cannot in time, the revocation being then in force on the leader but
// not yet here).
func (h *tokenHandler) fail(w http.ResponseWriter, r *http.Request, body []byte, err error, mustApply bool) {
	var nl *cp.NotLeaderError
	switch {
	case errors.Is(err, apitoken.ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", "no such token", "id")
	case errors.Is(err, apitoken.ErrExists):
		writeError(w, http.StatusConflict, "token_exists", err.Error()+" (retry: a new id is drawn)", "id")
	case errors.As(err, &nl) && nl.LeaderHTTPAddr != "" && r.Header.Get(HeaderForwarded) == "":
		ctx := r.Context()
		h.fwd.forwardThen(w, r, r.URL.RequestURI(), body, nl, func(resp *http.Response) error {
			return h.settle(ctx, resp, mustApply)
		})
	default:
		writeCPErr(w, r.Method, err)
	}
}

// settle waits until this node has applied the revision a leader's
// successful token write answered with.
func (h *tokenHandler) settle(ctx context.Context, resp *http.Response, mustApply bool) error {
	rev, err := strconv.ParseUint(resp.Header.Get(HeaderRevision), 10, 64)
	if resp.StatusCode/100 != 2 || err != nil || rev == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, applyWait)
	defer cancel()
	if err := h.t.WaitApplied(ctx, rev); err != nil && mustApply {
		return &BadRequest{http.StatusServiceUnavailable, "not_applied", "",
			fmt.Sprintf("the leader wrote the change at revision %d but this node has not applied it yet (%v): it is in force on the leader, and here once applied; retry to confirm", rev, err)}
	}
	return nil
}
