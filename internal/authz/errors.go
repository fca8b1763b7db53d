package authz

import "errors"

var (
	// ErrConfig is a bad Config.
	ErrConfig = errors.New("authz: bad config")
	// ErrUnknownRole is a role name not in the table.
	ErrUnknownRole = errors.New("authz: unknown role")
	// ErrNoPermission is a route registered without a permission, or with
	// one that does not exist; Router.Handler refuses to build.
	ErrNoPermission = errors.New("authz: route without a valid permission")
	// ErrBadHost is a request whose Host is not one of the allowed names
	// (DNS-rebinding defence): 421.
	ErrBadHost = errors.New("authz: host not allowed")
	// ErrCrossOrigin is a state-changing request a browser sent from another
	// origin (CSRF defence): 403.
	ErrCrossOrigin = errors.New("authz: cross-origin request refused")
	// ErrForbidden is an authenticated principal lacking the route's
	// permission: 403.
	ErrForbidden = errors.New("authz: forbidden")
)
