package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/portico-io/portico/internal/apierror"
	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/scheduler/store"
)

// Tenancy. A credential bound to a tenant (an API token or an IdP JWT with
// a tenant claim) acts for that tenant only: the tenant comes from the
// credential, never from the request, and another tenant's jobs and runs
// are 404, as if they did not exist. A credential without a tenant must
// hold tenant.any (an admin) and name the tenant it acts for explicitly.

// errTenantRequired: an admin acting for a tenant did not say which.
var errTenantRequired = &Error{Status: http.StatusBadRequest, Code: CodeInvalidParameter, Field: "tenant",
	Message: "name the tenant you act for (your credential is bound to none)"}

// actingTenant returns the tenant the caller acts for; requested is what
// the request names (the body's tenant, a ?tenant= parameter), if anything.
func actingTenant(r *http.Request, requested string) (string, error) {
	p, _ := authn.FromContext(r.Context())
	switch {
	case p.Tenant != "" && requested != "" && requested != p.Tenant:
		return "", &Error{Status: http.StatusForbidden, Code: authz.ResultForbidden, Field: "tenant",
			Message: "your credential is bound to another tenant"}
	case p.Tenant != "":
		return p.Tenant, nil
	case !authz.Allowed(p, authz.TenantAny):
		return "", &Error{Status: http.StatusForbidden, Code: authz.ResultForbidden, Field: "tenant",
			Message: "a credential bound to a tenant, or the tenant.any permission, is required"}
	case requested == "":
		return "", errTenantRequired
	}
	return requested, nil
}

// mayAccess reports whether the caller may see a job of tenant.
func mayAccess(ctx context.Context, tenant string) bool {
	p, _ := authn.FromContext(ctx)
	if p.Tenant != "" {
		return p.Tenant == tenant
	}
	return authz.Allowed(p, authz.TenantAny)
}

// job loads job id for the caller: ErrNotFound when it is another tenant's.
func (a *API) job(ctx context.Context, id int64) (store.Job, error) {
	j, err := a.cfg.Store.GetJob(ctx, id)
	if err != nil {
		return store.Job{}, err
	}
	if !mayAccess(ctx, j.Tenant) {
		return store.Job{}, store.ErrNotFound
	}
	return j, nil
}

// run loads run id for the caller: errNoRun when its job is another
// tenant's.
func (a *API) run(ctx context.Context, id int64) (store.Run, error) {
	run, err := a.cfg.Store.GetRun(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.Run{}, errNoRun
	}
	if err != nil {
		return store.Run{}, err
	}
	if _, err := a.job(ctx, run.ScheduleID); errors.Is(err, store.ErrNotFound) {
		return store.Run{}, errNoRun
	} else if err != nil {
		return store.Run{}, err
	}
	return run, nil
}

// writeAuthError renders the router's refusals in the API's envelope.
func writeAuthError(w http.ResponseWriter, _ *http.Request, status int, err error) {
	_ = writeJSON(w, status, apierror.Body(&Error{Status: status, Code: authz.Result(err), Message: err.Error()}))
}
