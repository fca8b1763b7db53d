// Package api is kvnode's HTTP surface: the key-value API under /v1/kv/,
// the token map at /v1/ring, the admin calls under /admin/v1/ and the API
// tokens kept in the consensus tier under /admin/v1/tokens. Requests
// are parsed and validated here and handed to the engine that serves their
// keyspace: /v1/kv/ goes to the leaderless store unless the keyspace is
// declared CP, /v1/cp/ and /v1/kv/ in a CP keyspace go to the consensus
// tier (501 on a node without it). Errors map to HTTP only here. Every
// route needs a credential holding its permission, and a credential
// confined to keyspaces touches only those (access.go).
package api

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/kvnode/antientropy"
	"github.com/portico-io/portico/kvnode/coordinator"
	"github.com/portico-io/portico/kvnode/record"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// Limits of the API.
const (
	MaxKeyBytes            = 256
	MaxValueBytes          = 1 << 20
	MaxIdempotencyKeyBytes = 128
	MaxTTL                 = 10 * 365 * 24 * time.Hour
)

// Engine serves one family of keyspaces.
type Engine interface {
	Get(ctx context.Context, key []byte, l coordinator.Level) (coordinator.ReadResult, error)
	Put(ctx context.Context, key, value []byte, o coordinator.WriteOptions) (coordinator.WriteResult, error)
	Delete(ctx context.Context, key []byte, o coordinator.WriteOptions) (coordinator.WriteResult, error)
	BatchGet(ctx context.Context, keys [][]byte, l coordinator.Level) ([]coordinator.BatchResult, error)
	VectorClocks(key []byte) bool
}

var _ Engine = (*coordinator.Coordinator)(nil)

// Admin is the node's operational surface.
type Admin interface {
	Ring() RingView
	Members() MemberList
	// Repair runs one full anti-entropy pass now.
	Repair(ctx context.Context) (antientropy.Result, error)
	RepairStatus() RepairStatus
	Join(ctx context.Context) error
	Decommission(ctx context.Context) error
	Ops
}

// Config is what Handler serves.
type Config struct {
	// KV is the leaderless store: /v1/kv/ for every keyspace not in
	// CPKeyspaces, and /v1/kv:batchGet.
	KV Engine
	// CP is the consensus tier; nil when the node runs without it
	// (/v1/cp/, and /v1/kv/ in a CP keyspace, answer 501).
	CP CPEngine
	// CPKeyspaces are the keyspaces the consensus tier serves, under
	// /v1/cp/{keyspace}/{key} and under /v1/kv/{keyspace}:{key} (the same
	// entry). /v1/cp/ answers 404 for any other keyspace. Names must pass
	// ParseKeyspace; the caller validates them.
	CPKeyspaces []string
	Admin       Admin
	// PeerTLS, when set, is the client configuration for calls to other
	// nodes' HTTP APIs (a follower forwarding to the Raft leader): https,
	// presenting this node's certificate. nil calls them over plain http.
	// A forwarded request carries the caller's Authorization header, so
	// the leader checks the caller's own credential; a caller that
	// authenticated with its certificate is vouched for by this node's
	// (and named in HeaderOnBehalfOf, for the record of token writes).
	PeerTLS *tls.Config
	// Auth authenticates callers; required unless InsecureNoAuth. See
	// access.go for what each route needs.
	Auth authz.Authenticator
	// AllowedHosts are the names clients reach the API by (default
	// DefaultAllowedHosts); another Host header gets 421.
	AllowedHosts []string
	// Metrics counts authentication decisions; nil counts nothing.
	Metrics *authz.Metrics
	// Logger gets one line per refused request (default: discarded).
	Logger *slog.Logger
	// InsecureNoAuth serves every route to every caller as an unconfined
	// admin, without checking Host or credentials: debugging and tests
	// only (kvnode --insecure-no-auth).
	InsecureNoAuth bool
	// Tokens is the API token table under /admin/v1/tokens (tokens.go);
	// nil, or a node without CP, answers 501 there.
	Tokens Tokens
	// Now is the clock of token creation and expiry (default time.Now);
	// it must be the Authenticator's.
	Now func() time.Time
}

// API is kvnode's HTTP API; safe for concurrent use.
type API struct {
	router  *authz.Router
	handler http.Handler
}

// New validates c and builds the routes, each on an authz.Router with its
// permission: a route without one fails New.
func New(c Config) (*API, error) {
	if c.Auth == nil && !c.InsecureNoAuth {
		return nil, errors.New("api: Auth is required (or InsecureNoAuth)")
	}
	hosts := c.AllowedHosts
	if len(hosts) == 0 {
		hosts = DefaultAllowedHosts
	}
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	auth := c.Auth
	if c.InsecureNoAuth {
		auth = refuseAll{}
	}
	router, err := authz.New(authz.Config{Authenticator: auth, AllowedHosts: hosts, WriteError: writeAuthError, Metrics: c.Metrics, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	rt := &routeTable{router: router}
	if c.InsecureNoAuth {
		rt.open = http.NewServeMux()
	}
	register(rt, c)
	a := &API{router: router}
	if a.handler, err = router.Handler(); err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	if rt.open != nil {
		a.handler = withAnonymous(rt.open)
	}
	return a, nil
}

// ServeHTTP implements http.Handler.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.handler.ServeHTTP(w, r) }

// Routes lists every route with the permission it requires.
func (a *API) Routes() []authz.Route { return a.router.Routes() }

func register(rt *routeTable, c Config) {
	var cph *cpHandler
	if c.CP != nil {
		cph = mountCP(rt, c.CP, c.CPKeyspaces, c.PeerTLS)
	} else {
		rt.handle("/v1/cp/", authz.KVRead, func(w http.ResponseWriter, _ *http.Request) {
			writeError(w, http.StatusNotImplemented, "not_implemented", "the consensus tier (/v1/cp/) is not available on this node", "")
		})
	}
	now := c.Now
	if now == nil {
		now = time.Now
	}
	mountTokens(rt, &tokenHandler{t: c.Tokens, fwd: cph, now: now})
	kv := &kvRouter{kv: c.KV, cp: cph, cpKeyspaces: keyspaceSet(c.CPKeyspaces)}
	rt.handle("GET /v1/kv/{key...}", authz.KVRead, kv.serve)
	rt.handle("PUT /v1/kv/{key...}", authz.KVWrite, kv.serve)
	rt.handle("DELETE /v1/kv/{key...}", authz.KVWrite, kv.serve)
	rt.handle("POST /v1/kv:batchGet", authz.KVRead, kv.batchGet)
	admin := c.Admin
	rt.handle("GET /v1/ring", authz.ClusterRead, func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, admin.Ring()) })
	rt.handle("GET /admin/v1/members", authz.ClusterRead, func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, admin.Members()) })
	rt.handle("GET /admin/v1/repair", authz.ClusterRead, func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, admin.RepairStatus()) })
	rt.handle("POST /admin/v1/repair", authz.ClusterAdmin, func(w http.ResponseWriter, r *http.Request) {
		res, err := admin.Repair(r.Context())
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, "repair_failed", err.Error(), "")
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
	rt.handle("POST /admin/v1/join", authz.ClusterAdmin, func(w http.ResponseWriter, r *http.Request) { adminAction(w, r, admin.Join) })
	rt.handle("POST /admin/v1/decommission", authz.ClusterAdmin, func(w http.ResponseWriter, r *http.Request) { adminAction(w, r, admin.Decommission) })
	mountOps(rt, admin)
}

func adminAction(w http.ResponseWriter, r *http.Request, fn func(context.Context) error) {
	if err := fn(r.Context()); err != nil {
		writeError(w, http.StatusConflict, "failed", err.Error(), "")
		return
	}
	writeJSON(w, http.StatusOK, ActionResult{Status: "ok"})
}

// BadRequest is a validation failure naming the offending field.
type BadRequest struct {
	Status  int
	Code    string
	Field   string
	Message string
}

func (e *BadRequest) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Message) }

// ParseKey validates a key taken from the path.
func ParseKey(key string) ([]byte, error) {
	switch {
	case key == "":
		return nil, &BadRequest{http.StatusBadRequest, "invalid_key", "key", "key is empty"}
	case len(key) > MaxKeyBytes:
		return nil, &BadRequest{http.StatusBadRequest, "invalid_key", "key", fmt.Sprintf("key is %d bytes, at most %d", len(key), MaxKeyBytes)}
	}
	return []byte(key), nil
}

// ParseTTL parses the ttl query parameter (whole seconds, 0 = none).
func ParseTTL(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || time.Duration(n)*time.Second > MaxTTL {
		return 0, &BadRequest{http.StatusBadRequest, "invalid_ttl", "ttl", fmt.Sprintf("ttl %q is not whole seconds between 0 and %d", s, int64(MaxTTL/time.Second))}
	}
	return time.Duration(n) * time.Second, nil
}

// ParseLevel parses the consistency query parameter.
func ParseLevel(s string) (coordinator.Level, error) {
	l, err := coordinator.ParseLevel(s)
	if err != nil {
		return 0, &BadRequest{http.StatusBadRequest, "invalid_consistency", "consistency", err.Error()}
	}
	return l, nil
}

// WriteRequest is a parsed PUT or DELETE.
type WriteRequest struct {
	Key   []byte
	Value []byte
	Opts  coordinator.WriteOptions
}

// ParseWrite validates a PUT/DELETE: key, consistency, ttl, X-KV-Context,
// Idempotency-Key and (for PUT) a body of at most MaxValueBytes.
func ParseWrite(r *http.Request, del bool) (WriteRequest, error) {
	var wr WriteRequest
	var err error
	if wr.Key, err = ParseKey(r.PathValue("key")); err != nil {
		return wr, err
	}
	q := r.URL.Query()
	if wr.Opts.Level, err = ParseLevel(q.Get("consistency")); err != nil {
		return wr, err
	}
	if wr.Opts.TTL, err = ParseTTL(q.Get("ttl")); err != nil {
		return wr, err
	}
	if wr.Opts.Context, err = record.DecodeContext(r.Header.Get("X-KV-Context")); err != nil {
		return wr, &BadRequest{http.StatusBadRequest, "invalid_context", "X-KV-Context", err.Error()}
	}
	wr.Opts.IdempotencyKey = r.Header.Get("Idempotency-Key")
	if len(wr.Opts.IdempotencyKey) > MaxIdempotencyKeyBytes {
		return wr, &BadRequest{http.StatusBadRequest, "invalid_idempotency_key", "Idempotency-Key", fmt.Sprintf("at most %d bytes", MaxIdempotencyKeyBytes)}
	}
	if del {
		return wr, nil
	}
	wr.Value, err = readValue(r)
	return wr, err
}

// readValue reads a PUT body of at most MaxValueBytes.
func readValue(r *http.Request) ([]byte, error) {
	if r.ContentLength > MaxValueBytes {
		return nil, &BadRequest{http.StatusRequestEntityTooLarge, "value_too_large", "value", fmt.Sprintf("value is %d bytes, at most %d", r.ContentLength, MaxValueBytes)}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxValueBytes+1))
	if err != nil {
		return nil, &BadRequest{http.StatusBadRequest, "invalid_value", "value", "reading body: " + err.Error()}
	}
	if len(body) > MaxValueBytes {
		return nil, &BadRequest{http.StatusRequestEntityTooLarge, "value_too_large", "value", fmt.Sprintf("value is over %d bytes", MaxValueBytes)}
	}
	return body, nil
}

func write(w http.ResponseWriter, r *http.Request, e Engine, del bool) {
	wr, err := ParseWrite(r, del)
	if err != nil {
		writeErr(w, err)
		return
	}
	var res coordinator.WriteResult
	if del {
		res, err = e.Delete(r.Context(), wr.Key, wr.Opts)
	} else {
		res, err = e.Put(r.Context(), wr.Key, wr.Value, wr.Opts)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("X-KV-Acks", fmt.Sprintf("%d/%d", res.Acks, res.N))
	if res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if del {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"acks": res.Acks, "n": res.N})
}

// Sibling is one version in a JSON response.
type Sibling struct {
	Value     []byte `json:"value"`
	ExpiresAt string `json:"expiresAt,omitempty"`
}

func siblings(recs []*kvv1.Record) []Sibling {
	out := make([]Sibling, len(recs))
	for i, r := range recs {
		out[i].Value = r.Value
		if r.ExpiresAtUnixMs != 0 {
			out[i].ExpiresAt = time.UnixMilli(r.ExpiresAtUnixMs).UTC().Format(time.RFC3339Nano)
		}
	}
	return out
}

func get(w http.ResponseWriter, r *http.Request, e Engine) {
	key, err := ParseKey(r.PathValue("key"))
	if err != nil {
		writeErr(w, err)
		return
	}
	l, err := ParseLevel(r.URL.Query().Get("consistency"))
	if err != nil {
		writeErr(w, err)
		return
	}
	res, err := e.Get(r.Context(), key, l)
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("X-KV-Acks", fmt.Sprintf("%d/%d", res.Acks, res.N))
	if e.VectorClocks(key) {
		w.Header().Set("X-KV-Context", record.EncodeContext(res.Context))
	}
	switch len(res.Records) {
	case 0:
		writeError(w, http.StatusNotFound, "not_found", "no value for key", "key")
	case 1:
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-KV-Siblings", "1")
		_, _ = w.Write(res.Records[0].Value)
	default:
		// Concurrent versions: all of them, for the client to merge and
		// write back with the context.
		w.Header().Set("X-KV-Siblings", strconv.Itoa(len(res.Records)))
		writeJSON(w, http.StatusMultipleChoices, map[string]any{"siblings": siblings(res.Records)})
	}
}

// BatchGetRequest is the body of POST /v1/kv:batchGet.
type BatchGetRequest struct {
	Keys        []string `json:"keys"`
	Consistency string   `json:"consistency"`
}

// BatchItem is one key of a batch-get response.
type BatchItem struct {
	Key      string    `json:"key"`
	Found    bool      `json:"found"`
	Siblings []Sibling `json:"siblings,omitempty"`
	Context  string    `json:"context,omitempty"`
	Error    *ErrBody  `json:"error,omitempty"`
}

// ParseBatchGet validates a batch-get body: known fields only, a valid
// consistency level and valid keys (the count is capped by the engine).
func ParseBatchGet(body io.Reader) ([][]byte, coordinator.Level, error) {
	var req BatchGetRequest
	dec := json.NewDecoder(io.LimitReader(body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, 0, &BadRequest{http.StatusBadRequest, "invalid_body", "keys", "body: " + err.Error()}
	}
	l, err := ParseLevel(req.Consistency)
	if err != nil {
		return nil, 0, err
	}
	keys := make([][]byte, len(req.Keys))
	for i, k := range req.Keys {
		if keys[i], err = ParseKey(k); err != nil {
			var br *BadRequest
			errors.As(err, &br)
			br.Field = fmt.Sprintf("keys[%d]", i)
			return nil, 0, br
		}
	}
	return keys, l, nil
}

func (rt *kvRouter) batchGet(w http.ResponseWriter, r *http.Request) {
	e := rt.kv
	keys, l, err := ParseBatchGet(r.Body)
	for i := 0; err == nil && i < len(keys); i++ {
		field, ks := fmt.Sprintf("keys[%d]", i), coordinator.Keyspace(keys[i])
		if err = reservedKeyspace(field, ks); err == nil {
			err = allowKeyspace(r, field, ks)
		}
	}
	if err == nil {
		err = rt.ringOnly(keys)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	res, err := e.BatchGet(r.Context(), keys, l)
	if err != nil {
		writeErr(w, err)
		return
	}
	items := make([]BatchItem, len(res))
	for i, br := range res {
		items[i] = BatchItem{Key: string(br.Key), Found: br.Result.Found(), Siblings: siblings(br.Result.Records)}
		if e.VectorClocks(br.Key) {
			items[i].Context = record.EncodeContext(br.Result.Context)
		}
		if br.Err != nil {
			_, code, msg := classify(br.Err)
			items[i].Error = &ErrBody{Code: code, Message: msg}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}

// ErrBody is the JSON error shape.
type ErrBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

func classify(err error) (int, string, string) {
	var br *BadRequest
	switch {
	case errors.As(err, &br):
		return br.Status, br.Code, br.Error()
	case errors.Is(err, coordinator.ErrUnavailable):
		return http.StatusServiceUnavailable, "unavailable", err.Error()
	case errors.Is(err, coordinator.ErrTimeout):
		return http.StatusGatewayTimeout, "timeout", err.Error()
	case errors.Is(err, coordinator.ErrIdempotencyMismatch):
		return http.StatusUnprocessableEntity, "idempotency_mismatch", err.Error()
	case errors.Is(err, coordinator.ErrBatchTooLarge):
		return http.StatusRequestEntityTooLarge, "batch_too_large", err.Error()
	}
	return http.StatusInternalServerError, "internal", err.Error()
}

func writeErr(w http.ResponseWriter, err error) {
	status, code, msg := classify(err)
	field := ""
	var br *BadRequest
	if errors.As(err, &br) {
		field = br.Field
	}
	writeError(w, status, code, msg, field)
}

func writeError(w http.ResponseWriter, status int, code, msg, field string) {
	writeJSON(w, status, map[string]any{"error": ErrBody{Code: code, Message: msg, Field: field}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
