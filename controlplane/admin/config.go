package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/portico-io/portico/controlplane/nodes"
	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/controlplane/store"
)

func (h *Handler) listVersions(w http.ResponseWriter, r *http.Request) error {
	cursor, limit, err := page(r)
	if err != nil {
		return err
	}
	before, err := numericCursor(cursor)
	if err != nil {
		return err
	}
	items, next, err := h.store.Versions(r.Context(), before, limit)
	if err != nil {
		return err
	}
	out := list[store.VersionInfo]{Items: nonNil(items)}
	if next != 0 {
		out.NextCursor = strconv.FormatInt(next, 10)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// versionView is one version: metadata, what changed, and the whole config.
type versionView struct {
	Version    int64     `json:"version"`
	CreatedAt  time.Time `json:"createdAt"`
	Author     string    `json:"author"`
	Reason     string    `json:"reason"`
	RollbackOf *int64    `json:"rollbackOf,omitempty"`
	// Changes are the version's first store.MaxPageSize changes; when
	// there are more, ChangesNextCursor pages through the rest at
	// GET /config/versions/{n}/changes?cursor=.
	Changes           []store.ChangeRef `json:"changes"`
	ChangesNextCursor string            `json:"changesNextCursor,omitempty"`
	Config            configView        `json:"config"`
}

// configView is a config as JSON, each kind's resources in name order. API
// keys are only counted: there may be a million, and their hashes are not
// for display.
type configView struct {
	Clusters       []*spec.Cluster       `json:"clusters"`
	Routes         []*spec.Route         `json:"routes"`
	JWTProviders   []*spec.JWTProvider   `json:"jwtProviders"`
	Consumers      []*spec.Consumer      `json:"consumers"`
	Revocations    []*spec.Revocation    `json:"revocations"`
	RateLimitRules []*spec.RateLimitRule `json:"ratelimitRules"`
	Secrets        []secretView          `json:"secrets"`
	Listeners      []*spec.Listener      `json:"listeners"`
	RedisProxies   []*spec.RedisProxy    `json:"redisProxies"`
	APIKeyCount    int                   `json:"apiKeyCount"`
}

func sorted[V any](m map[string]V) []V {
	out := make([]V, 0, len(m))
	for _, k := range spec.SortedKeys(m) {
		out = append(out, m[k])
	}
	return out
}

func sortedTable[V comparable](t *spec.Table[V]) []V {
	names := t.Names()
	out := make([]V, len(names))
	for i, k := range names {
		out[i] = t.Lookup(k)
	}
	return out
}

func viewConfig(c *spec.Config) configView {
	return configView{
		Clusters:       sorted(c.Clusters),
		Routes:         sorted(c.Routes),
		JWTProviders:   sorted(c.JWTProviders),
		Consumers:      sortedTable(c.Consumers),
		Revocations:    sortedTable(c.Revocations),
		RateLimitRules: sorted(c.RateLimitRules),
		Secrets:        secretViews(sorted(c.Secrets)),
		Listeners:      sorted(c.Listeners),
		RedisProxies:   sorted(c.RedisProxies),
		APIKeyCount:    c.APIKeys.Len(),
	}
}

func secretViews(s []*spec.Secret) []secretView {
	out := make([]secretView, len(s))
	for i, x := range s {
		out[i] = viewSecret(x)
	}
	return out
}

func (h *Handler) getVersion(w http.ResponseWriter, r *http.Request) error {
	n, err := strconv.ParseInt(r.PathValue("n"), 10, 64)
	if err != nil || n < 1 {
		return store.ErrNotFound
	}
	v, err := h.store.Version(r.Context(), n)
	if err != nil {
		return err
	}
	cfg, err := h.store.ConfigAt(r.Context(), n)
	if err != nil {
		return err
	}
	changes := v.Changes
	if changes == nil {
		changes = []store.ChangeRef{}
	}
	out := versionView{Version: v.Version, CreatedAt: v.CreatedAt, Author: v.Author,
		Reason: v.Reason, RollbackOf: v.RollbackOf, Changes: changes, Config: viewConfig(cfg)}
	if v.ChangesNext != 0 {
		out.ChangesNextCursor = strconv.FormatInt(v.ChangesNext, 10)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// listVersionChanges pages through what one version changed (an import
// changes a million resources), oldest first.
func (h *Handler) listVersionChanges(w http.ResponseWriter, r *http.Request) error {
	n, err := strconv.ParseInt(r.PathValue("n"), 10, 64)
	if err != nil || n < 1 {
		return store.ErrNotFound
	}
	cursor, limit, err := page(r)
	if err != nil {
		return err
	}
	after, err := numericCursor(cursor)
	if err != nil {
		return err
	}
	if limit == 0 {
		limit = store.DefaultPageSize
	}
	items, next, err := h.store.VersionChanges(r.Context(), n, after, limit)
	if err != nil {
		return err
	}
	if len(items) == 0 {
		if _, err := h.store.Version(r.Context(), n); err != nil {
			return err // 404 for a version that does not exist
		}
	}
	out := list[store.ChangeRef]{Items: nonNil(items)}
	if next != 0 {
		out.NextCursor = strconv.FormatInt(next, 10)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

type rollbackRequest struct {
	ToVersion *int64 `json:"toVersion"`
}

type rollbackResponse struct {
	Version    int64 `json:"version"`
	RollbackOf int64 `json:"rollbackOf"`
}

// rollback makes a new version whose content equals toVersion (see
// store.Rollback: it always makes a version).
func (h *Handler) rollback(w http.ResponseWriter, r *http.Request) error {
	body, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	m, err := meta(r, body, true)
	if err != nil {
		return err
	}
	if err := jsonObject(body); err != nil {
		return err
	}
	var req rollbackRequest
	if err := decodeStrict(body, &req); err != nil {
		return err
	}
	if req.ToVersion == nil {
		return &Error{Status: http.StatusUnprocessableEntity, Code: spec.CodeRequired, Field: "toVersion", Message: "is required"}
	}
	to := *req.ToVersion
	res, err := h.store.Rollback(r.Context(), m, to, func(v int64) (int, []byte) {
		b, _ := json.Marshal(rollbackResponse{Version: v, RollbackOf: to}) // cannot fail
		return http.StatusCreated, b
	})
	if errors.Is(err, store.ErrNotFound) {
		return &Error{Status: http.StatusUnprocessableEntity, Code: spec.CodeUnknownRef, Field: "toVersion", Message: "no such version"}
	}
	if err != nil {
		return err
	}
	if res.Replayed {
		replay(w, res)
		return nil
	}
	setVersion(w, res.Version)
	writeJSON(w, http.StatusCreated, rollbackResponse{Version: res.Version, RollbackOf: to})
	return nil
}

func (h *Handler) listAudit(w http.ResponseWriter, r *http.Request) error {
	cursor, limit, err := page(r)
	if err != nil {
		return err
	}
	before, err := numericCursor(cursor)
	if err != nil {
		return err
	}
	items, next, err := h.store.Audit(r.Context(), before, limit)
	if err != nil {
		return err
	}
	for i := range items {
		items[i].Diff = redactDiff(items[i].Kind, items[i].Diff)
	}
	out := list[store.AuditEntry]{Items: nonNil(items)}
	if next != 0 {
		out.NextCursor = strconv.FormatInt(next, 10)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) listNodes(w http.ResponseWriter, _ *http.Request) error {
	out := list[nodes.Status]{Items: []nodes.Status{}}
	if h.nodes != nil {
		out.Items = append(out.Items, h.nodes.List()...)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// nonNil makes empty lists render as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
