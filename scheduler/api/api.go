// Package api is the scheduler's REST API under /v1: jobs (create with
// Idempotency-Key, read, list with cursors, PATCH with If-Match, pause,
// resume, trigger, soft delete), their runs and the dead-letter queue.
// Errors use the platform envelope {"error": {"code", "message", "field"}};
// invalid specs are 422 naming the field and store nothing. Times are UTC.
package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/secret"
	"github.com/portico-io/portico/scheduler/store"
)

// Limits and defaults.
const (
	// MaxBodyBytes bounds request bodies; larger specs are refused with
	// 413 before parsing (payloads over jobspec.MaxPayloadBytes but within
	// this are 422 naming target.payload).
	MaxBodyBytes     = 1 << 20
	DefaultPageSize  = 50
	MaxPageSize      = 200
	maxIdemKeyLength = 255
)

// Store is what the API needs from the store.
type Store interface {
	CreateJob(ctx context.Context, spec *jobspec.Spec, idemKey, requestHash string) (store.Job, bool, error)
	GetJob(ctx context.Context, id int64) (store.Job, error)
	ListJobs(ctx context.Context, tenant string, after int64, limit int) ([]store.Job, error)
	ReplaceSpec(ctx context.Context, id int64, version int, spec *jobspec.Spec) (store.Job, error)
	SetEnabled(ctx context.Context, id int64, enabled bool) (store.Job, error)
	DeleteJob(ctx context.Context, id int64, version int) error
	Trigger(ctx context.Context, id int64) (store.Run, error)
	ListRuns(ctx context.Context, scheduleID, after int64, limit int) ([]store.Run, error)
	ListDead(ctx context.Context, tenant string, after int64, limit int) ([]store.Run, error)
	GetRun(ctx context.Context, id int64) (store.Run, error)
	CancelRun(ctx context.Context, id int64) (store.Run, error)
}

var _ Store = (*store.Store)(nil)

// Config configures the API.
type Config struct {
	Store Store // required
	// Guard validates HTTP targets (required).
	Guard *jobspec.Guard
	// TargetKinds are the non-HTTP target kinds accepted, with their
	// validators (target.Registry.Kinds); nil means HTTP only.
	TargetKinds map[string]jobspec.KindValidator
	// Secrets, when configured, is where target.http.secretRef must name
	// an existing file bound to the job's tenant and URL at create/PATCH
	// (422 otherwise). Unconfigured, the reference is accepted and checked
	// by whichever worker runs it (Resolve, at every attempt).
	Secrets *secret.Dir
	// Auth authenticates callers (required); every route needs a
	// permission (jobs.read, jobs.write) and the tenant comes from the
	// credential (see access.go).
	Auth authz.Authenticator
	// AllowedHosts are the names clients reach the API by (default
	// loopback); other Host headers get 421.
	AllowedHosts []string
	// Tokens stores tenant API tokens, managed under /v1/tokens (required;
	// the Auth authenticator should look tokens up in the same table).
	Tokens TokenTable
	// Metrics counts authentication decisions; nil counts nothing.
	Metrics *authz.Metrics
	Logger  *slog.Logger
}

// API serves /v1; safe for concurrent use.
type API struct {
	cfg     Config
	router  *authz.Router
	handler http.Handler
}

// New validates cfg and builds the routes.
func New(cfg Config) (*API, error) {
	if cfg.Store == nil || cfg.Guard == nil || cfg.Auth == nil || cfg.Tokens == nil {
		return nil, errors.New("api: Store, Tokens, Guard and Auth are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	hosts := cfg.AllowedHosts
	if len(hosts) == 0 {
		hosts = DefaultAllowedHosts
	}
	router, err := authz.New(authz.Config{Authenticator: cfg.Auth, AllowedHosts: hosts, WriteError: writeAuthError,
		Metrics: cfg.Metrics, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	a := &API{cfg: cfg, router: router}
	a.handle("POST /v1/jobs", authz.JobsWrite, a.create)
	a.handle("GET /v1/jobs", authz.JobsRead, a.list)
	a.handle("GET /v1/jobs/{id}", authz.JobsRead, a.get)
	a.handle("PATCH /v1/jobs/{id}", authz.JobsWrite, a.patch)
	a.handle("DELETE /v1/jobs/{id}", authz.JobsWrite, a.delete)
	a.handle("POST /v1/jobs/{id}", authz.JobsWrite, a.action) // {id}:pause | :resume | :trigger
	a.handle("GET /v1/jobs/{id}/runs", authz.JobsRead, a.runs)
	a.handle("GET /v1/dlq", authz.JobsRead, a.dlq)
	a.handle("GET /v1/runs/{id}", authz.JobsRead, a.getRun)
	a.handle("POST /v1/runs/{id}", authz.JobsWrite, a.runAction) // {id}:cancel
	a.tokenRoutes()
	if a.handler, err = router.Handler(); err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	return a, nil
}

// DefaultAllowedHosts are the loopback names.
var DefaultAllowedHosts = []string{"localhost", "127.0.0.1", "::1"}

// Routes lists every route with the permission it requires.
func (a *API) Routes() []authz.Route { return a.router.Routes() }

// ServeHTTP implements http.Handler.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.handler.ServeHTTP(w, r) }

func (a *API) handle(pattern string, perm authz.Permission, h func(w http.ResponseWriter, r *http.Request) error) {
	a.router.HandleFunc(pattern, perm, func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			a.writeError(w, r, err)
		}
	})
}

// jobJSON is a job as the API shows it: the spec plus server fields.
type jobJSON struct {
	JobID     string     `json:"jobId"`
	Version   int        `json:"version"`
	Status    string     `json:"status"`
	NextRunAt *time.Time `json:"nextRunAt"`
	CreatedAt time.Time  `json:"createdAt"`
	UpdatedAt time.Time  `json:"updatedAt"`
	*jobspec.Spec
}

func toJobJSON(j store.Job) jobJSON {
	status := "ACTIVE"
	switch {
	case j.Deleted:
		status = "DELETED"
	case !j.Enabled:
		status = "PAUSED"
	}
	return jobJSON{JobID: strconv.FormatInt(j.ID, 10), Version: j.Version, Status: status, NextRunAt: utcPtr(j.NextRunAt),
		CreatedAt: j.CreatedAt.UTC(), UpdatedAt: j.UpdatedAt.UTC(), Spec: j.Spec}
}

type runJSON struct {
	RunID          string     `json:"runId"`
	JobID          string     `json:"jobId"`
	ScheduledAt    time.Time  `json:"scheduledAt"`
	Status         string     `json:"status"`
	Manual         bool       `json:"manual,omitempty"`
	Attempt        int        `json:"attempt"`
	NextAttemptAt  *time.Time `json:"nextAttemptAt,omitempty"`
	LeaseExpiresAt *time.Time `json:"leaseExpiresAt,omitempty"`
	WorkerID       *string    `json:"workerId,omitempty"`
	LastError      *string    `json:"lastError,omitempty"`
	DispatchedAt   *time.Time `json:"dispatchedAt,omitempty"`
	FinishedAt     *time.Time `json:"finishedAt,omitempty"`
	IdempotencyKey string     `json:"idempotencyKey"`
}

func toRunJSON(r store.Run) runJSON {
	return runJSON{RunID: strconv.FormatInt(r.ID, 10), JobID: strconv.FormatInt(r.ScheduleID, 10), ScheduledAt: r.ScheduledAt.UTC(),
		Status: r.Status, Manual: r.Manual, Attempt: r.Attempt, NextAttemptAt: utcPtr(r.NextAttemptAt),
		LeaseExpiresAt: utcPtr(r.LeaseExpiresAt), WorkerID: r.WorkerID, LastError: r.LastError,
		DispatchedAt: utcPtr(r.DispatchedAt), FinishedAt: utcPtr(r.FinishedAt),
		IdempotencyKey: jobspec.IdempotencyKey(r.ScheduleID, r.ScheduledAt)}
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	return json.NewEncoder(w).Encode(v)
}

func writeJob(w http.ResponseWriter, status int, j store.Job) error {
	w.Header().Set("ETag", etag(j.Version))
	return writeJSON(w, status, toJobJSON(j))
}

func etag(v int) string { return `"` + strconv.Itoa(v) + `"` }

func (a *API) create(w http.ResponseWriter, r *http.Request) error {
	key := r.Header.Get("Idempotency-Key")
	switch {
	case key == "":
		return &Error{Status: http.StatusPreconditionRequired, Code: CodeIdempotencyKeyRequired, Message: "Idempotency-Key header is required on POST /v1/jobs", Field: "Idempotency-Key"}
	case len(key) > maxIdemKeyLength:
		return badParam("Idempotency-Key", "must be at most 255 bytes")
	}
	spec, err := decodeSpec(http.MaxBytesReader(nil, r.Body, MaxBodyBytes))
	if err != nil {
		return err
	}
	// A missing tenant is the spec's 422 (tenant: required), as without
	// authentication.
	if spec.Tenant, err = actingTenant(r, spec.Tenant); err != nil && !errors.Is(err, errTenantRequired) {
		return err
	}
	if err := a.validate(r.Context(), spec); err != nil {
		return err
	}
	canonical, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(canonical)
	// Keys are the tenant's: another tenant reusing one neither replays
	// this answer nor learns it was used.
	scoped := fmt.Sprintf("%d:%s/%s", len(spec.Tenant), spec.Tenant, key)
	job, created, err := a.cfg.Store.CreateJob(r.Context(), spec, scoped, hex.EncodeToString(sum[:]))
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/jobs/"+strconv.FormatInt(job.ID, 10))
	if created {
		return writeJob(w, http.StatusCreated, job)
	}
	return writeJob(w, http.StatusOK, job)
}

func decodeSpec(body io.Reader) (*jobspec.Spec, error) {
	spec, err := jobspec.Decode(body)
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return nil, mb
	}
	return spec, err
}

func pathID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, store.ErrNotFound
	}
	return id, nil
}

func (a *API) get(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	j, err := a.job(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJob(w, http.StatusOK, j)
}

// page reads cursor and limit query parameters.
func page(r *http.Request) (after int64, limit int, err error) {
	limit = DefaultPageSize
	if c := r.URL.Query().Get("cursor"); c != "" {
		if after, err = strconv.ParseInt(c, 10, 64); err != nil || after < 0 {
			return 0, 0, badParam("cursor", "not a cursor returned by this API")
		}
	}
	if l := r.URL.Query().Get("limit"); l != "" {
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 || limit > MaxPageSize {
			return 0, 0, badParam("limit", "must be 1..200")
		}
	}
	return after, limit, nil
}

func nextCursor(n, limit int, lastID int64) string {
	if n < limit {
		return ""
	}
	return strconv.FormatInt(lastID, 10)
}

type listJSON[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"nextCursor,omitempty"`
}

func (a *API) list(w http.ResponseWriter, r *http.Request) error {
	tenant, err := actingTenant(r, r.URL.Query().Get("tenant"))
	if err != nil {
		return err
	}
	after, limit, err := page(r)
	if err != nil {
		return err
	}
	jobs, err := a.cfg.Store.ListJobs(r.Context(), tenant, after, limit)
	if err != nil {
		return err
	}
	out := listJSON[jobJSON]{Items: []jobJSON{}}
	for _, j := range jobs {
		out.Items = append(out.Items, toJobJSON(j))
	}
	if len(jobs) > 0 {
		out.NextCursor = nextCursor(len(jobs), limit, jobs[len(jobs)-1].ID)
	}
	return writeJSON(w, http.StatusOK, out)
}

// ifMatch reads the required If-Match version.
func ifMatch(r *http.Request) (int, error) {
	v := r.Header.Get("If-Match")
	if v == "" {
		return 0, &Error{Status: http.StatusPreconditionRequired, Code: CodePreconditionRequired, Message: "If-Match with the job's ETag (its version) is required", Field: "If-Match"}
	}
	n, err := strconv.Atoi(strings.Trim(strings.TrimPrefix(v, "W/"), `"`))
	if err != nil || n < 1 {
		return 0, store.ErrPreconditionFailed
	}
	return n, nil
}

func (a *API) patch(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	version, err := ifMatch(r)
	if err != nil {
		return err
	}
	raw, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, MaxBodyBytes))
	if err != nil {
		return err
	}
	var patch map[string]any
	if err := json.Unmarshal(raw, &patch); err != nil || patch == nil {
		return &jobspec.FieldError{Message: "body must be a JSON object (a JSON merge patch of the job spec)"}
	}
	cur, err := a.job(r.Context(), id)
	if err != nil {
		return err
	}
	if cur.Deleted {
		return store.ErrNotFound
	}
	if t, ok := patch["tenant"]; ok && t != cur.Tenant {
		return &jobspec.FieldError{Field: "tenant", Message: "cannot be changed"}
	}
	base, err := json.Marshal(cur.Spec)
	if err != nil {
		return err
	}
	var doc any
	if err := json.Unmarshal(base, &doc); err != nil {
		return err
	}
	merged, err := json.Marshal(mergePatch(doc, patch))
	if err != nil {
		return err
	}
	spec, err := jobspec.Decode(strings.NewReader(string(merged)))
	if err != nil {
		return err
	}
	// The decoder matches keys case-insensitively, so {"Tenant": …} also
	// names the tenant: whatever the patch said, the job stays its owner's.
	if spec.Tenant != cur.Tenant {
		return &jobspec.FieldError{Field: "tenant", Message: "cannot be changed"}
	}
	if err := a.validate(r.Context(), spec); err != nil {
		return err
	}
	j, err := a.cfg.Store.ReplaceSpec(r.Context(), id, version, spec)
	if err != nil {
		return err
	}
	return writeJob(w, http.StatusOK, j)
}

// validate normalizes spec and checks that a secretRef names an existing
// secret when this scheduler has a secrets directory.
func (a *API) validate(ctx context.Context, spec *jobspec.Spec) error {
	if err := spec.NormalizeKinds(ctx, a.cfg.Guard, a.cfg.TargetKinds); err != nil {
		return err
	}
	if h := spec.Target.HTTP; h != nil && h.SecretRef != nil && a.cfg.Secrets.Configured() {
		name := h.SecretRef.Name
		err := a.cfg.Secrets.Authorize(spec.Tenant, name, h.URL)
		switch {
		case err == nil:
		case errors.Is(err, secret.ErrDestination):
			return &jobspec.FieldError{Field: "target.http.url", Message: err.Error()}
		case errors.Is(err, secret.ErrBindings):
			a.cfg.Logger.Error("api: secret bindings unavailable", "err", err)
			return &Error{Status: http.StatusServiceUnavailable, Code: CodeSecretsUnavailable,
				Message: "the scheduler's secret bindings are unavailable; its operator must fix them (see its log)"}
		case errors.Is(err, secret.ErrNotFound):
			return &jobspec.FieldError{Field: "target.http.secretRef.name",
				Message: fmt.Sprintf("secret %q is not in the secrets directory %s", name, a.cfg.Secrets.Path())}
		default: // not bound to this tenant, or an invalid name
			return &jobspec.FieldError{Field: "target.http.secretRef.name", Message: err.Error()}
		}
	}
	return nil
}

// mergePatch applies an RFC 7386 JSON merge patch.
func mergePatch(doc, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	d, ok := doc.(map[string]any)
	if !ok {
		d = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(d, k)
		} else {
			d[k] = mergePatch(d[k], v)
		}
	}
	return d
}

func (a *API) delete(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	version, err := ifMatch(r)
	if err != nil {
		return err
	}
	if _, err := a.job(r.Context(), id); err != nil {
		return err
	}
	if err := a.cfg.Store.DeleteJob(r.Context(), id, version); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *API) action(w http.ResponseWriter, r *http.Request) error {
	idStr, verb, ok := strings.Cut(r.PathValue("id"), ":")
	id, err := strconv.ParseInt(idStr, 10, 64)
	if !ok || err != nil || id <= 0 {
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no such action: use /v1/jobs/{id}:pause, :resume or :trigger"}
	}
	if _, err := a.job(r.Context(), id); err != nil {
		return err
	}
	switch verb {
	case "pause", "resume":
		j, err := a.cfg.Store.SetEnabled(r.Context(), id, verb == "resume")
		if err != nil {
			return err
		}
		return writeJob(w, http.StatusOK, j)
	case "trigger":
		run, err := a.cfg.Store.Trigger(r.Context(), id)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusAccepted, toRunJSON(run))
	}
	return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "unknown action " + strconv.Quote(verb)}
}

func (a *API) getRun(w http.ResponseWriter, r *http.Request) error {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return errNoRun
	}
	run, err := a.run(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, toRunJSON(run))
}

var errNoRun = &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no such run"}

// runAction serves POST /v1/runs/{id}:cancel: 200 with the cancelled run,
// 409 when it already ended.
func (a *API) runAction(w http.ResponseWriter, r *http.Request) error {
	idStr, verb, ok := strings.Cut(r.PathValue("id"), ":")
	id, err := strconv.ParseInt(idStr, 10, 64)
	if !ok || err != nil || id <= 0 || verb != "cancel" {
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "no such action: use /v1/runs/{id}:cancel"}
	}
	if _, err := a.run(r.Context(), id); err != nil {
		return err
	}
	run, err := a.cfg.Store.CancelRun(r.Context(), id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errNoRun
	case errors.Is(err, store.ErrFinished):
		return &Error{Status: http.StatusConflict, Code: CodeConflict, Message: "the run has already finished"}
	case err != nil:
		return err
	}
	return writeJSON(w, http.StatusOK, toRunJSON(run))
}

func (a *API) runs(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	after, limit, err := page(r)
	if err != nil {
		return err
	}
	if _, err := a.job(r.Context(), id); err != nil {
		return err
	}
	runs, err := a.cfg.Store.ListRuns(r.Context(), id, after, limit)
	if err != nil {
		return err
	}
	return writeRuns(w, runs, limit)
}

func writeRuns(w http.ResponseWriter, runs []store.Run, limit int) error {
	out := listJSON[runJSON]{Items: []runJSON{}}
	for _, r := range runs {
		out.Items = append(out.Items, toRunJSON(r))
	}
	if len(runs) > 0 {
		out.NextCursor = nextCursor(len(runs), limit, runs[len(runs)-1].ID)
	}
	return writeJSON(w, http.StatusOK, out)
}

func (a *API) dlq(w http.ResponseWriter, r *http.Request) error {
	after, limit, err := page(r)
	if err != nil {
		return err
	}
	tenant, err := actingTenant(r, r.URL.Query().Get("tenant"))
	if err != nil {
		return err
	}
	runs, err := a.cfg.Store.ListDead(r.Context(), tenant, after, limit)
	if err != nil {
		return err
	}
	return writeRuns(w, runs, limit)
}
