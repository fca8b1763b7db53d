// Package admin is the control plane's admin REST API under /admin/v1: JSON
// CRUD of the spec resources, consumers' API keys, config versions,
// rollback, audit and connected xDS nodes. TLS secrets' private keys are
// write-only and sealed before they are stored (see secrets.go).
//
// Semantics every client relies on: POST requires an Idempotency-Key (same
// key and body replay the first response; same key, other body: 422),
// except POST /tokens, whose answer (the token, shown once) is never kept
// to be replayed;
// PUT, PATCH and DELETE require If-Match with the ETag from GET (428 when
// missing, 412 when stale); every accepted change is one new config version,
// reported in the X-Portico-Config-Version header; invalid input changes
// nothing and gets {"error": {"code", "message", "field"}}.
//
// Every route is registered with the permission it needs (internal/authz);
// callers authenticate with a bearer token (API token or operator JWT) or a
// client certificate, and the audit author is who they proved to be.
package admin

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-io/portico/controlplane/nodes"
	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/controlplane/store"
	"github.com/portico-io/portico/internal/apierror"
	"github.com/portico-io/portico/internal/authz"
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
	// MaxImportBytes caps the body of POST /consumers:import; 0 means
	// DefaultMaxImportBytes.
	MaxImportBytes int64
	// Sealer encrypts secrets' private keys at rest; nil refuses inline
	// private keys (secrets referencing files still work).
	Sealer Sealer
	// Auth authenticates callers; required.
	Auth authz.Authenticator
	// AllowedHosts are the names clients reach the API by (the Host
	// header); default DefaultAllowedHosts.
	AllowedHosts []string
	// LoopbackIdPs accepts a JWT provider whose JWKS or introspection
	// endpoint is plain http on a loopback host without the provider
	// saying allowInsecureLoopback: the API sets it on the stored provider
	// (visible on GET). For a development machine whose IdP runs beside
	// the platform (make run); never in production.
	LoopbackIdPs bool
}

// DefaultAllowedHosts are the loopback names.
var DefaultAllowedHosts = []string{"localhost", "127.0.0.1", "::1"}

// Handler serves the admin API. It is safe for concurrent use.
type Handler struct {
	store    *store.Store
	nodes    NodeLister
	rollouts Rollouts
	sealer   Sealer
	log      *slog.Logger
	maxBody  int64
	// maxImport caps the import's body (it carries up to MaxImportKeys).
	maxImport int64
	metrics   *metrics
	router    *authz.Router
	// patterns mirrors the router's patterns, to answer 405 with Allow.
	patterns *http.ServeMux
	loopIdPs bool
	handler  http.Handler
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
	if cfg.MaxImportBytes == 0 {
		cfg.MaxImportBytes = DefaultMaxImportBytes
	}
	if cfg.MaxImportBytes < 0 {
		return nil, errors.New("admin: MaxImportBytes must not be negative")
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
		store:     cfg.Store,
		nodes:     cfg.Nodes,
		rollouts:  cfg.Rollouts,
		sealer:    cfg.Sealer,
		log:       cfg.Logger,
		maxBody:   cfg.MaxBodyBytes,
		maxImport: cfg.MaxImportBytes,
		metrics:   m,
		patterns:  http.NewServeMux(),
		timeNow:   time.Now,
		loopIdPs:  cfg.LoopbackIdPs,
	}
	if cfg.Auth == nil {
		return nil, errors.New("admin: Auth is required")
	}
	hosts := cfg.AllowedHosts
	if len(hosts) == 0 {
		hosts = DefaultAllowedHosts
	}
	am, err := authz.NewMetrics(cfg.Registry, "controlplane_admin")
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	h.router, err = authz.New(authz.Config{Authenticator: cfg.Auth, AllowedHosts: hosts, WriteError: writeAuthError,
		Metrics: am, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	h.routes()
	if h.handler, err = h.router.Handler(); err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	return h, nil
}

// writeAuthError renders the router's refusals in the API's error envelope.
func writeAuthError(w http.ResponseWriter, _ *http.Request, status int, err error) {
	writeJSON(w, status, apierror.Body(&Error{Status: status, Code: authz.Result(err), Message: err.Error()}))
}

// Routes lists every route with the permission it requires.
func (h *Handler) Routes() []authz.Route { return h.router.Routes() }

// managedKinds are served as /admin/v1/<kind>: spec's Served kinds. API
// keys are not: they are created and revoked under their consumer, and
// never listed with hashes.
var managedKinds = spec.ServedKinds()

// routes is the whole API surface, one line per endpoint.
func (h *Handler) routes() {
	for _, k := range managedKinds {
		base := Prefix + "/" + string(k)
		read, write := kindPermissions(k)
		h.Handle("GET "+base, read, h.list(k))
		h.Handle("POST "+base, write, h.create(k))
		h.Handle("GET "+base+"/{name}", read, h.get(k))
		h.Handle("PUT "+base+"/{name}", write, h.replace(k))
		h.Handle("PATCH "+base+"/{name}", write, h.patch(k))
		h.Handle("DELETE "+base+"/{name}", write, h.remove(k))
	}

	keys := Prefix + "/consumers/{name}/keys"
	h.Handle("GET "+keys, authz.SecurityRead, h.listKeys)
	h.Handle("POST "+keys, authz.SecurityWrite, h.createKey)
	h.Handle("GET "+keys+"/{id}", authz.SecurityRead, h.getKey)
	h.Handle("DELETE "+keys+"/{id}", authz.SecurityWrite, h.revokeKey)
	// Consumers and their keys (as hashes) in bulk, as one version: keys
	// are credentials, so security.write.
	h.Handle("POST "+Prefix+"/consumers:import", authz.SecurityWrite, h.importConsumers)

	h.tokenRoutes()

	h.Handle("GET "+Prefix+"/config/versions", authz.ConfigRead, h.listVersions)
	h.Handle("GET "+Prefix+"/config/versions/{n}", authz.ConfigRead, h.getVersion)
	h.Handle("GET "+Prefix+"/config/versions/{n}/changes", authz.ConfigRead, h.listVersionChanges)
	h.Handle("POST "+Prefix+"/config/rollback", authz.RolloutWrite, h.rollback)
	// security.write too when the batch touches security kinds (apply.go).
	h.Handle("POST "+Prefix+ApplyPath, authz.ConfigWrite, h.applyConfig)
	h.Handle("GET "+Prefix+"/audit", authz.SecurityRead, h.listAudit)
	h.Handle("GET "+Prefix+"/nodes", authz.ConfigRead, h.listNodes)
	h.rolloutRoutes()

	// Anything else under the prefix gets a JSON 404 or 405 (after
	// authentication: an anonymous caller learns nothing about the routes).
	h.router.Handle(Prefix+"/", authz.ConfigRead, h.instrument("unmatched", h.unmatched))
}

// kindPermissions are the permissions to read and to change a kind: the
// credentials and trust material (spec's Security kinds: secrets, JWT
// providers, revocations) are the security-admin's, the rest is config.
func kindPermissions(k spec.Kind) (read, write authz.Permission) {
	if d := k.Info(); d != nil && d.Security {
		return authz.SecurityRead, authz.SecurityWrite
	}
	return authz.ConfigRead, authz.ConfigWrite
}

// HandlerFunc is an endpoint: it writes a success response or returns an
// error, which the handler turns into the JSON error envelope.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// Handle registers fn for a ServeMux pattern ("METHOD /admin/v1/...")
// behind permission perm, with metrics labelled by the pattern, request
// logging and error mapping.
func (h *Handler) Handle(pattern string, perm authz.Permission, fn HandlerFunc) {
	h.router.Handle(pattern, perm, h.instrument(pattern, fn))
	h.patterns.Handle(pattern, http.NotFoundHandler())
}

// ServeHTTP serves the API; mount it at "/admin/v1/" (or at "/").
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.handler.ServeHTTP(w, r)
}

// unmatched answers 405 when another method has an endpoint at this path,
// 404 otherwise.
func (h *Handler) unmatched(w http.ResponseWriter, r *http.Request) error {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := h.patterns.Handler(probe); pattern != "" {
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
