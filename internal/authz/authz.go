// Package authz decides what an authenticated principal (internal/authn) may
// do on Portico's HTTP APIs, and enforces it with one middleware.
//
// There is one table, role → permissions, and nothing else grants a
// permission. Every route is registered on a Router with the permission it
// needs; a route registered without one makes Router.Handler fail, so a
// server cannot start with an open route. Routes lists them for tests that
// walk every route (see authztest.Walk).
//
// The middleware runs, in order: Host check (421) → cross-origin check for
// state-changing methods (403) → authentication (401 with
// WWW-Authenticate: Bearer, or 503 when the credential cannot be checked) →
// authorization (403) → the handler, with the Principal in its context
// (authn.FromContext). Refusals are rendered by the caller's ErrorWriter so
// each API keeps its own error shape.
//
// Tenant and keyspace scoping of data (which tenant's jobs, which keyspace)
// is the handlers' job, from Principal.Tenant and Principal.AllowsKeyspace;
// this package only ensures a tenant- or keyspace-bound principal never
// holds a platform-wide permission.
package authz

import (
	"fmt"
	"slices"

	"github.com/portico-io/portico/internal/authn"
)

// Permission is one thing a route may require. Each API uses a subset.
type Permission string

// Permissions.
const (
	// ConfigRead: read config kinds, versions, the audit log, nodes, rollouts.
	ConfigRead Permission = "config.read"
	// ConfigWrite: create, change and delete config kinds (routes, clusters…).
	ConfigWrite Permission = "config.write"
	// SecurityRead: list credentials' metadata: API tokens, API keys, JWT
	// providers, secrets, revocations. Never the secrets themselves. Not a
	// viewer's: who holds which credential is itself sensitive.
	SecurityRead Permission = "security.read"
	// SecurityWrite: mint and revoke tokens and API keys, change JWT
	// providers, secrets and revocations.
	SecurityWrite Permission = "security.write"
	// RolloutWrite: start and abort rollouts, roll config back.
	RolloutWrite Permission = "rollout.write"
	// JobsRead and JobsWrite: a scheduler tenant's own jobs and runs.
	JobsRead  Permission = "jobs.read"
	JobsWrite Permission = "jobs.write"
	// TenantAny: act on a tenant other than one's own, which the request
	// must name explicitly (the scheduler's admin path).
	TenantAny Permission = "tenant.any"
	// KVRead and KVWrite: kvnode data, within Principal.Keyspaces.
	KVRead  Permission = "kv.read"
	KVWrite Permission = "kv.write"
	// ClusterRead: list members and cluster state.
	ClusterRead Permission = "cluster.read"
	// ClusterAdmin: change membership (join, decommission), repair.
	ClusterAdmin Permission = "cluster.admin"
)

// allPermissions in a stable order.
var allPermissions = []Permission{
	ConfigRead, ConfigWrite, SecurityRead, SecurityWrite, RolloutWrite,
	JobsRead, JobsWrite, TenantAny, KVRead, KVWrite, ClusterRead, ClusterAdmin,
}

// Valid reports whether p is one of the permissions above.
func (p Permission) Valid() bool { return slices.Contains(allPermissions, p) }

// AllPermissions returns every permission.
func AllPermissions() []Permission { return slices.Clone(allPermissions) }

// Role is a named set of permissions.
type Role string

// Roles.
const (
	Viewer        Role = "viewer"
	Editor        Role = "editor"
	SecurityAdmin Role = "security-admin"
	Admin         Role = "admin"
)

var reads = []Permission{ConfigRead, JobsRead, KVRead, ClusterRead}

// table is THE role → permissions table. Read-only.
//
// Editors change configuration and data (a tenant's jobs, kv entries) but
// not credentials, rollouts or membership; security admins manage
// credentials but change no configuration; admins do everything.
var table = map[Role][]Permission{
	Viewer:        reads,
	Editor:        append(slices.Clone(reads), ConfigWrite, JobsWrite, KVWrite),
	SecurityAdmin: append(slices.Clone(reads), SecurityRead, SecurityWrite),
	Admin:         allPermissions,
}

// Roles returns every role, least to most privileged.
func Roles() []Role { return []Role{Viewer, Editor, SecurityAdmin, Admin} }

// Valid reports whether r is in the table.
func (r Role) Valid() bool { _, ok := table[r]; return ok }

// Permissions returns what r grants (nil for an unknown role).
func (r Role) Permissions() []Permission { return slices.Clone(table[r]) }

// Has reports whether r grants p.
func (r Role) Has(p Permission) bool { return slices.Contains(table[r], p) }

// CheckRoles returns ErrUnknownRole for the first name not in the table.
// Call it on role names from configuration (claim mappings, certificate
// tables) and on tokens being created: an unknown name would silently grant
// nothing.
func CheckRoles(names []string) error {
	for _, n := range names {
		if !Role(n).Valid() {
			return fmt.Errorf("%w: %q (want one of viewer, editor, security-admin, admin)", ErrUnknownRole, n)
		}
	}
	return nil
}

// Tenant- and keyspace-bound principals hold at most these permissions,
// whatever their roles: a tenant's token can never reconfigure the gateway.
var (
	tenantScoped   = []Permission{JobsRead, JobsWrite}
	keyspaceScoped = []Permission{KVRead, KVWrite}
)

// Allowed reports whether p may exercise perm: one of p's roles grants it,
// and p's confinement does not exclude it (a principal with a Tenant holds
// only jobs.*, one with Keyspaces only kv.*; one with both holds nothing).
func Allowed(p authn.Principal, perm Permission) bool {
	if p.Tenant != "" && !slices.Contains(tenantScoped, perm) {
		return false
	}
	if len(p.Keyspaces) > 0 && !slices.Contains(keyspaceScoped, perm) {
		return false
	}
	for _, r := range p.Roles {
		if Role(r).Has(perm) {
			return true
		}
	}
	return false
}

// CheckGrant reports whether caller may mint a credential holding roles:
// every permission of every role must be one caller holds itself, so a
// security admin cannot mint an admin token (no escalation). Unknown role
// names are ErrUnknownRole; a missing permission is ErrForbidden naming it.
func CheckGrant(caller authn.Principal, roles []string) error {
	if err := CheckRoles(roles); err != nil {
		return err
	}
	for _, name := range roles {
		for _, perm := range Role(name).Permissions() {
			if !Allowed(caller, perm) {
				return fmt.Errorf("%w: you may only grant roles whose permissions you hold (%s needs %s)", ErrForbidden, name, perm)
			}
		}
	}
	return nil
}
