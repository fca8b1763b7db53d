package authz

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/portico-io/portico/internal/authn"
)

// Authenticator establishes who is calling; *authn.Authenticator is one.
type Authenticator interface {
	Authenticate(r *http.Request) (authn.Principal, error)
}

var _ Authenticator = (*authn.Authenticator)(nil)

// ErrorWriter renders a refusal in the API's own error shape. status is 401,
// 403, 421 or 503; err wraps this package's or authn's sentinels (match with
// errors.Is), and its message carries no secret. For 401 the middleware has
// already set WWW-Authenticate.
type ErrorWriter func(w http.ResponseWriter, r *http.Request, status int, err error)

// WriteJSONError is the default ErrorWriter:
// {"error":{"code":"<result>","message":"<err>"}}.
func WriteJSONError(w http.ResponseWriter, _ *http.Request, status int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": Result(err), "message": err.Error()}})
}

// Result classifies a refusal as one of the Result* values (the metric
// label, a stable machine-readable code).
func Result(err error) string {
	switch {
	case err == nil:
		return ResultOK
	case errors.Is(err, ErrBadHost):
		return ResultBadHost
	case errors.Is(err, ErrCrossOrigin):
		return ResultCrossOrigin
	case errors.Is(err, ErrForbidden):
		return ResultForbidden
	case errors.Is(err, authn.ErrUnavailable):
		return ResultUnavailable
	default:
		return ResultUnauthenticated
	}
}

// Config configures a Router.
type Config struct {
	// Authenticator is required.
	Authenticator Authenticator
	// AllowedHosts are the names clients use to reach this API: exact host
	// names or IP literals ("localhost", "127.0.0.1", "admin.portico.svc"),
	// or "*.example.com" for any name below example.com. The port is
	// ignored, case does not matter. Required: a request naming any other
	// Host is refused with 421, so a DNS-rebound name cannot reach the API
	// from a browser.
	AllowedHosts []string
	// TrustedOrigins may send state-changing browser requests
	// ("https://console.example.com"); none by default.
	TrustedOrigins []string
	// WriteError renders refusals (default WriteJSONError).
	WriteError ErrorWriter
	// Metrics, when set, counts decisions.
	Metrics *Metrics
	// Logger gets one line per refusal (default slog.Default()).
	Logger *slog.Logger
}

// Route is a registered pattern and the permission it requires.
type Route struct {
	Pattern    string
	Permission Permission
}

// Router is an http.ServeMux whose every route requires a permission. Handle
// routes, then build the server's handler with Handler. Registration is safe
// for concurrent use; the handler is safe for concurrent use.
type Router struct {
	cfg    Config
	hosts  []string
	cop    *http.CrossOriginProtection
	mux    *http.ServeMux
	mu     sync.Mutex // guards below
	routes []Route
	errs   []error
	built  bool
}

// New validates cfg and returns an empty Router.
func New(cfg Config) (*Router, error) {
	if cfg.Authenticator == nil {
		return nil, fmt.Errorf("%w: Authenticator is required", ErrConfig)
	}
	if len(cfg.AllowedHosts) == 0 {
		return nil, fmt.Errorf("%w: AllowedHosts is required", ErrConfig)
	}
	rt := &Router{cfg: cfg, mux: http.NewServeMux(), cop: http.NewCrossOriginProtection()}
	for _, h := range cfg.AllowedHosts {
		n := normalizeHost(h)
		if net.ParseIP(n) == nil && !hostPatternRE.MatchString(n) {
			return nil, fmt.Errorf("%w: allowed host %q", ErrConfig, h)
		}
		rt.hosts = append(rt.hosts, n)
	}
	for _, o := range cfg.TrustedOrigins {
		if err := rt.cop.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("%w: trusted origin: %w", ErrConfig, err)
		}
	}
	if rt.cfg.WriteError == nil {
		rt.cfg.WriteError = WriteJSONError
	}
	if rt.cfg.Logger == nil {
		rt.cfg.Logger = slog.Default()
	}
	return rt, nil
}

// Handle registers h for pattern (http.ServeMux syntax, "POST
// /admin/v1/tokens") behind perm. A missing or unknown permission, a nil
// handler, a duplicate pattern or a registration after Handler is recorded
// and makes Handler fail; the route is not registered. Like
// http.ServeMux.Handle, it panics on a pattern ServeMux rejects.
func (rt *Router) Handle(pattern string, perm Permission, h http.Handler) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var err error
	switch {
	case rt.built:
		err = fmt.Errorf("%w: %q registered after Handler", ErrConfig, pattern)
	case perm == "":
		err = fmt.Errorf("%w: %q has none", ErrNoPermission, pattern)
	case !perm.Valid():
		err = fmt.Errorf("%w: %q has unknown permission %q", ErrNoPermission, pattern, perm)
	case h == nil:
		err = fmt.Errorf("%w: %q has a nil handler", ErrConfig, pattern)
	case slices.ContainsFunc(rt.routes, func(r Route) bool { return r.Pattern == pattern }):
		err = fmt.Errorf("%w: %q registered twice", ErrConfig, pattern)
	}
	if err != nil {
		rt.errs = append(rt.errs, err)
		return
	}
	rt.mux.Handle(pattern, h)
	rt.routes = append(rt.routes, Route{Pattern: pattern, Permission: perm})
}

// HandleFunc is Handle for a function.
func (rt *Router) HandleFunc(pattern string, perm Permission, f func(http.ResponseWriter, *http.Request)) {
	if f == nil {
		rt.Handle(pattern, perm, nil)
		return
	}
	rt.Handle(pattern, perm, http.HandlerFunc(f))
}

// Routes returns every registered route, in registration order.
func (rt *Router) Routes() []Route {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return slices.Clone(rt.routes)
}

// Handler returns the authenticating, authorizing handler of all routes, or
// the registration errors: a server whose routes are not all protected must
// not start. Routes registered afterwards are refused.
func (rt *Router) Handler() (http.Handler, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.built = true
	if len(rt.errs) > 0 {
		return nil, errors.Join(rt.errs...)
	}
	perms := make(map[string]Permission, len(rt.routes))
	for _, r := range rt.routes {
		perms[r.Pattern] = r.Permission
	}
	return &guard{rt: rt, perms: perms}, nil
}

type guard struct {
	rt    *Router
	perms map[string]Permission // immutable
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt := g.rt
	// Matching has no side effects; the pattern names the route in logs.
	h, pattern := rt.mux.Handler(r)
	perm, registered := g.perms[pattern]
	if !registered {
		pattern = ""
	}
	if !rt.hostAllowed(r.Host) {
		rt.refuse(w, r, pattern, http.StatusMisdirectedRequest, fmt.Errorf("%w: %q", ErrBadHost, truncate(r.Host)), authn.Principal{})
		return
	}
	if err := rt.cop.Check(r); err != nil {
		rt.refuse(w, r, pattern, http.StatusForbidden, fmt.Errorf("%w: %w", ErrCrossOrigin, err), authn.Principal{})
		return
	}
	p, err := rt.authenticate(r)
	if err != nil {
		status := http.StatusUnauthorized
		if errors.Is(err, authn.ErrUnavailable) {
			status = http.StatusServiceUnavailable
		} else {
			w.Header().Set("WWW-Authenticate", challenge(err))
		}
		rt.refuse(w, r, pattern, status, err, authn.Principal{})
		return
	}
	if !registered {
		// No route (404, 405) or a redirect to the canonical path: never a
		// registered handler. Only authenticated callers learn which.
		rt.cfg.Metrics.observe(ResultOK)
		h.ServeHTTP(w, r)
		return
	}
	if !Allowed(p, perm) {
		rt.refuse(w, r, pattern, http.StatusForbidden, fmt.Errorf("%w: %s lacks %s", ErrForbidden, p, perm), p)
		return
	}
	rt.cfg.Metrics.observe(ResultOK)
	// ServeHTTP, not h: the mux sets the path values.
	rt.mux.ServeHTTP(w, r.WithContext(authn.WithPrincipal(r.Context(), p)))
}

// authenticate refuses a state-changing request that carries neither an
// Authorization header nor a verified client certificate before asking the
// Authenticator, so no ambient credential (cookie, basic auth a browser
// remembers) can ever change state, whatever Authenticator is plugged in.
func (rt *Router) authenticate(r *http.Request) (authn.Principal, error) {
	if !safeMethod(r.Method) && len(r.Header.Values("Authorization")) == 0 && !authn.HasClientCert(r) {
		return authn.Principal{}, authn.ErrNoCredentials
	}
	p, err := rt.cfg.Authenticator.Authenticate(r)
	if err == nil && p.IsZero() {
		err = authn.ErrNoCredentials
	}
	return p, err
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// challenge is the RFC 6750 §3 WWW-Authenticate value for err.
func challenge(err error) string {
	switch {
	case errors.Is(err, authn.ErrNoCredentials), errors.Is(err, authn.ErrBadCertificate):
		return "Bearer"
	case errors.Is(err, authn.ErrMalformed):
		return `Bearer error="invalid_request"`
	default:
		return `Bearer error="invalid_token"`
	}
}

func (rt *Router) refuse(w http.ResponseWriter, r *http.Request, pattern string, status int, err error, p authn.Principal) {
	result := Result(err)
	rt.cfg.Metrics.observe(result)
	attrs := []any{
		slog.String("result", result),
		slog.Int("status", status),
		slog.String("method", r.Method),
		slog.String("route", pattern),
		slog.String("remote", r.RemoteAddr),
		slog.String("reason", err.Error()),
	}
	if !p.IsZero() {
		attrs = append(attrs, slog.String("principal", p.String()))
	}
	level := slog.LevelInfo
	if status == http.StatusServiceUnavailable {
		level = slog.LevelWarn
	}
	rt.cfg.Logger.Log(r.Context(), level, "authz: request refused", attrs...)
	rt.cfg.WriteError(w, r, status, err)
}

func (rt *Router) hostAllowed(host string) bool {
	h := normalizeHost(host)
	if h == "" {
		return false
	}
	for _, a := range rt.hosts {
		if a == h || strings.HasPrefix(a, "*.") && strings.HasSuffix(h, a[1:]) && len(h) > len(a)-1 {
			return true
		}
	}
	return false
}

// normalizeHost drops the port, the brackets of an IPv6 literal and a
// trailing dot, and lower-cases.
func normalizeHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// hostPatternRE is a DNS name, optionally "*." and a DNS name.
var hostPatternRE = regexp.MustCompile(`^(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
