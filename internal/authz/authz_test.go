package authz_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
)

// The table, spelled out: a change to who may do what shows up here.
func TestTable(t *testing.T) {
	P := authz.AllPermissions
	want := map[authz.Role][]authz.Permission{
		authz.Viewer:        {authz.ConfigRead, authz.JobsRead, authz.KVRead, authz.ClusterRead},
		authz.Editor:        {authz.ConfigRead, authz.JobsRead, authz.KVRead, authz.ClusterRead, authz.ConfigWrite, authz.JobsWrite, authz.KVWrite},
		authz.SecurityAdmin: {authz.ConfigRead, authz.JobsRead, authz.KVRead, authz.ClusterRead, authz.SecurityRead, authz.SecurityWrite},
		authz.Admin:         P(),
	}
	for _, role := range authz.Roles() {
		if !role.Valid() {
			t.Fatalf("%s invalid", role)
		}
		for _, perm := range P() {
			if got, w := role.Has(perm), slices.Contains(want[role], perm); got != w {
				t.Errorf("%s has %s = %v, want %v", role, perm, got, w)
			}
		}
	}
	if len(want) != len(authz.Roles()) {
		t.Fatal("role list and table differ")
	}
	for _, perm := range P() {
		if !perm.Valid() {
			t.Errorf("%s invalid", perm)
		}
	}
	if authz.Permission("config.*").Valid() || authz.Role("root").Valid() || authz.Role("root").Has(authz.ConfigRead) {
		t.Fatal("unknown names accepted")
	}
}

func TestAllowed(t *testing.T) {
	pr := func(tenant string, keyspaces []string, roles ...string) authn.Principal {
		return authn.Principal{Kind: authn.KindToken, ID: "0123456789abcdef", Roles: roles, Tenant: tenant, Keyspaces: keyspaces}
	}
	for _, tc := range []struct {
		name string
		p    authn.Principal
		perm authz.Permission
		want bool
	}{
		{"admin anything", pr("", nil, "admin"), authz.ClusterAdmin, true},
		{"no roles", pr("", nil), authz.ConfigRead, false},
		{"unknown role", pr("", nil, "root"), authz.ConfigRead, false},
		{"union of roles", pr("", nil, "viewer", "security-admin"), authz.SecurityWrite, true},
		{"viewer cannot write", pr("", nil, "viewer"), authz.ConfigWrite, false},
		{"editor cannot roll out", pr("", nil, "editor"), authz.RolloutWrite, false},
		{"editor cannot mint tokens", pr("", nil, "editor"), authz.SecurityWrite, false},
		{"security-admin cannot change config", pr("", nil, "security-admin"), authz.ConfigWrite, false},
		{"tenant editor writes jobs", pr("acme", nil, "editor"), authz.JobsWrite, true},
		{"tenant admin cannot change config", pr("acme", nil, "admin"), authz.ConfigWrite, false},
		{"tenant admin cannot act for others", pr("acme", nil, "admin"), authz.TenantAny, false},
		{"keyspace token reads kv", pr("", []string{"ks"}, "viewer"), authz.KVRead, true},
		{"keyspace admin cannot decommission", pr("", []string{"ks"}, "admin"), authz.ClusterAdmin, false},
		{"keyspace and tenant: nothing", pr("acme", []string{"ks"}, "admin"), authz.KVRead, false},
	} {
		if got := authz.Allowed(tc.p, tc.perm); got != tc.want {
			t.Errorf("%s: Allowed = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCheckRoles(t *testing.T) {
	if err := authz.CheckRoles([]string{"viewer", "admin", "security-admin", "editor"}); err != nil {
		t.Fatal(err)
	}
	if err := authz.CheckRoles([]string{"viewer", "Admin"}); !errors.Is(err, authz.ErrUnknownRole) {
		t.Fatalf("err = %v", err)
	}
}

func TestCheckGrantRefusesEscalation(t *testing.T) {
	secAdmin := authn.Principal{Kind: authn.KindToken, ID: "s", Roles: []string{string(authz.SecurityAdmin)}}
	if err := authz.CheckGrant(secAdmin, []string{string(authz.Viewer), string(authz.SecurityAdmin)}); err != nil {
		t.Fatalf("security-admin granting viewer+security-admin: %v", err)
	}
	if err := authz.CheckGrant(secAdmin, []string{string(authz.Editor)}); !errors.Is(err, authz.ErrForbidden) {
		t.Fatalf("security-admin granting editor: %v, want authz.ErrForbidden", err)
	}
	if err := authz.CheckGrant(secAdmin, []string{"root"}); !errors.Is(err, authz.ErrUnknownRole) {
		t.Fatalf("unknown role: %v, want authz.ErrUnknownRole", err)
	}
	tenant := authn.Principal{Kind: authn.KindToken, ID: "t", Roles: []string{string(authz.Admin)}, Tenant: "acme"}
	if err := authz.CheckGrant(tenant, []string{string(authz.Viewer)}); !errors.Is(err, authz.ErrForbidden) {
		t.Fatalf("a tenant-bound admin holds no platform read: %v, want authz.ErrForbidden", err)
	}
}
