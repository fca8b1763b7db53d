// Package admin is the control plane's admin REST API under /admin/v1: JSON
// CRUD of the spec resources, consumers' API keys, config versions,
// rollback, audit and connected xDS nodes. TLS secrets' private keys are
// write-only and sealed before they are stored (see secrets.go).
//
// Semantics every client relies on: POST requires an Idempotency-Key (same
// key and body replay the first response; same key, other body: 422);
// PUT, PATCH and DELETE require If-Match with the ETag from GET (428 when
// missing, 412 when stale); every accepted change is one new config version,
// reported in the X-Portico-Config-Version header; invalid input changes
// nothing and gets {"error": {"code", "message", "field"}}.
package admin

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-io/portico/controlplane/nodes"
	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/controlplane/store"
)

// Prefix is where the API is mounted.
const Prefix = "/admin/v1"

// DefaultMaxBodyBytes caps request bodies (413 beyond).
const DefaultMaxBodyBytes = 1 << 20

// Request headers.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderAuthor         = "X-Portico-Author"
	HeaderReason         = "X-Portico-Reason"
	// HeaderConfigVersion is set on every write response: the version the
	// change created (or the head, when nothing changed).
	HeaderConfigVersion = "X-Portico-Config-Version"
	// HeaderReplayed is "true" on a response replayed for an idempotency key.
	HeaderReplayed = "Idempotent-Replayed"
)

// NodeLister lists the connected xDS clients; *nodes.Tracker implements it.
type NodeLister interface {
	List() []nodes.Status
}

var _ NodeLister = (*nodes.Tracker)(nil)

// Config configures the handler. Store is required; zero values of the
// rest mean defaults (no nodes, a private metrics registry, no logs).
type Config struct {
	Store *store.Store
	Nodes NodeLister
	// Rollouts serves /config/rollouts; nil leaves those endpoints out.
	Rollouts Rollouts
	Registry prometheus.Registerer
	Logger   *slog.Logger
	// MaxBodyBytes caps request bodies; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Sealer encrypts secrets' private keys at rest; nil refuses inline
	// private keys (secrets referencing files still work).
	Sealer Sealer
}

// Handler serves the admin API. It is safe for concurrent use.
type Handler struct {
	store    *store.Store
	nodes    NodeLister
	rollouts Rollouts
	sealer   Sealer
	log      *slog.Logger
	maxBody  int64
	metrics  *metrics
	mux      *http.ServeMux
	timeNow  func() time.Time
}

// New validates cfg, registers the metrics and builds the routes.
func New(cfg Config) (*Handler, error) {
	if cfg.Store == nil {
		return nil, errors.New("admin: Store is required")
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, errors.New("admin: MaxBodyBytes must not be negative")
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	h := &Handler{
		store:    cfg.Store,
		nodes:    cfg.Nodes,
		rollouts: cfg.Rollouts,
		sealer:   cfg.Sealer,
		log:      cfg.Logger,
		maxBody:  cfg.MaxBodyBytes,
		metrics:  m,
		mux:      http.NewServeMux(),
		timeNow:  time.Now,
	}
	h.routes()
	return h, nil
}

// managedKinds are served as /admin/v1/<kind>. API keys are not: they are
// created and revoked under their consumer, and never listed with hashes.
var managedKinds = []spec.Kind{spec.KindCluster, spec.KindRoute, spec.KindJWTProvider,
	spec.KindConsumer, spec.KindRevocation, spec.KindRateLimitRule, spec.KindSecret, spec.KindListener,
	spec.KindRedisProxy}

// routes is the whole API surface, one line per endpoint.
func (h *Handler) routes() {
	for _, k := range managedKinds {
		base := Prefix + "/" + string(k)
		h.Handle("GET "+base, h.list(k))
		h.Handle("POST "+base, h.create(k))
		h.Handle("GET "+base+"/{name}", h.get(k))
		h.Handle("PUT "+base+"/{name}", h.replace(k))
		h.Handle("PATCH "+base+"/{name}", h.patch(k))
		h.Handle("DELETE "+base+"/{name}", h.remove(k))
	}

	keys := Prefix + "/consumers/{name}/keys"
	h.Handle("GET "+keys, h.listKeys)
	h.Handle("POST "+keys, h.createKey)
	h.Handle("GET "+keys+"/{id}", h.getKey)
	h.Handle("DELETE "+keys+"/{id}", h.revokeKey)

	h.Handle("GET "+Prefix+"/config/versions", h.listVersions)
	h.Handle("GET "+Prefix+"/config/versions/{n}", h.getVersion)
	h.Handle("POST "+Prefix+"/config/rollback", h.rollback)
	h.Handle("GET "+Prefix+"/audit", h.listAudit)
	h.Handle("GET "+Prefix+"/nodes", h.listNodes)
	h.rolloutRoutes()

	// Anything else under the prefix gets a JSON 404 or 405.
	h.mux.Handle(Prefix+"/", h.instrument("unmatched", h.unmatched))
}

// HandlerFunc is an endpoint: it writes a success response or returns an
// error, which the handler turns into the JSON error envelope.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// Handle registers fn for a ServeMux pattern ("METHOD /admin/v1/..."), with
// metrics labelled by the pattern, request logging and error mapping. Later
// endpoints (rollouts) are added with it.
func (h *Handler) Handle(pattern string, fn HandlerFunc) {
	h.mux.Handle(pattern, h.instrument(pattern, fn))
}

// ServeHTTP serves the API; mount it at "/admin/v1/" (or at "/").
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mux.ServeHTTP(w, r)
}

// unmatched answers 405 when another method has an endpoint at this path,
// 404 otherwise.
func (h *Handler) unmatched(w http.ResponseWriter, r *http.Request) error {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := h.mux.Handler(probe); pattern != "" && pattern != Prefix+"/" {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) > 0 {
		for _, m := range allowed {
			w.Header().Add("Allow", m)
		}
		return &Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed", Message: r.Method + " is not supported here"}
	}
	return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no such endpoint"}
}
