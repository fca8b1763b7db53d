package kvnode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/kvnode/api"
	"github.com/portico-io/portico/kvnode/apitoken"
)

// DefaultCacheNodeKeyspaces are the keyspaces a cachenode certificate may
// touch by default: the cache cluster's topology keyspace.
var DefaultCacheNodeKeyspaces = []string{"cache"}

// AuthConfig is who may call the HTTP API (see kvnode/api's access.go for
// what each route needs):
//   - the bootstrap admin token (AdminTokenFile) and any token of Tokens;
//   - API tokens minted through /admin/v1/tokens, kept by the consensus
//     tier (kvnode/apitoken) on a node that runs it;
//   - the operators' IdP JWTs (JWT), roles (and, with
//     JWT.KeyspacesClaim, keyspaces) from its claims;
//   - verified client certificates: operator → admin; kvnode → admin
//     (followers forward member changes to the leader with theirs);
//     cachenode → editor confined to CacheNodeKeyspaces; any other role
//     gets nothing.
type AuthConfig struct {
	// AdminTokenFile is the bootstrap admin token file (the control
	// plane's in make run): made (0600) when missing, accepted as admin.
	AdminTokenFile string
	// Tokens are further API tokens (tests); nil: none.
	Tokens authn.TokenStore
	// JWT accepts the IdP's tokens; nil refuses them.
	JWT *authn.JWTConfig
	// Hosts are the names clients reach the API by (default loopback);
	// the node's own advertised HTTP host is always added, since
	// followers forward to the leader by it.
	Hosts []string
	// CacheNodeKeyspaces confine cachenode certificates (default
	// DefaultCacheNodeKeyspaces; an explicitly empty, non-nil list gives
	// cachenodes no access).
	CacheNodeKeyspaces []string
	// InsecureNoAuth serves every route to anyone as an admin, with no
	// credential and no Host check: debugging and tests only. It is never
	// implied by InsecurePlaintext: a plaintext node still requires
	// bearer tokens.
	InsecureNoAuth bool
}

// certRoles maps workload certificates to authz roles on the HTTP API.
func (a AuthConfig) certConfig(trustDomain string) authn.CertConfig {
	c := authn.CertConfig{TrustDomain: trustDomain, Roles: map[identity.Role][]string{
		identity.Operator: {string(authz.Admin)},
		identity.KVNode:   {string(authz.Admin)},
	}}
	ks := a.CacheNodeKeyspaces
	if ks == nil {
		ks = DefaultCacheNodeKeyspaces
	}
	if len(ks) > 0 {
		c.Roles[identity.CacheNode] = []string{string(authz.Editor)}
		c.Keyspaces = map[identity.Role][]string{identity.CacheNode: append([]string(nil), ks...)}
	}
	return c
}

// authenticator builds the API's authenticator from n.cfg.Auth and the
// node's token table (nil without the consensus tier). Its clock is the
// node's (Config.Now), as the token routes' is, so expiry is judged by one
// clock.
func (n *Node) authenticator(tokens *apitoken.Store) (*authn.Authenticator, error) {
	a := n.cfg.Auth
	td := ""
	if n.tls != nil {
		td = n.tls.TrustDomain()
	}
	cfg := authn.Config{JWT: a.JWT, Certs: a.certConfig(td), Logger: n.cfg.Logger, TimeNow: n.cfg.Now}
	var stores multiStore
	if a.AdminTokenFile != "" {
		tok, created, err := authn.BootstrapToken(a.AdminTokenFile)
		if err != nil {
			return nil, fmt.Errorf("kvnode: admin token: %w", err)
		}
		if created {
			n.cfg.Logger.Warn("kvnode: created the bootstrap admin token file", "file", a.AdminTokenFile)
		}
		st, err := authn.NewStaticTokens(authn.StoredToken{ID: tok.ID, Hash: tok.Hash, Name: "bootstrap-admin", Roles: []string{string(authz.Admin)}})
		if err != nil {
			return nil, fmt.Errorf("kvnode: admin token: %w", err)
		}
		stores = append(stores, st)
	}
	if tokens != nil {
		stores = append(stores, tokens)
	}
	if a.Tokens != nil {
		stores = append(stores, a.Tokens)
	}
	if len(stores) > 0 {
		cfg.Tokens = stores
	}
	return authn.New(cfg)
}

// multiStore looks a token up in each store in turn.
type multiStore []authn.TokenStore

func (m multiStore) LookupToken(ctx context.Context, id string) (authn.StoredToken, error) {
	for _, s := range m {
		t, err := s.LookupToken(ctx, id)
		if !errors.Is(err, authn.ErrTokenNotFound) {
			return t, err
		}
	}
	return authn.StoredToken{}, authn.ErrTokenNotFound
}

func (m multiStore) TouchToken(ctx context.Context, id string, at time.Time) error {
	for _, s := range m {
		if _, err := s.LookupToken(ctx, id); err == nil {
			return s.TouchToken(ctx, id, at)
		}
	}
	return nil
}

// apiConfig is what the HTTP API serves: every route behind its
// permission (AuthConfig), and calls to other nodes' APIs (forwarding to
// the Raft leader) over https with this node's certificate on a TLS node,
// verifying the peer is a kvnode. advertised is this node's HTTP address
// as peers reach it.
func (n *Node) apiConfig(cpEngine api.CPEngine, advertised string) (api.Config, error) {
	c := api.Config{KV: n.engine(), CP: cpEngine, CPKeyspaces: n.cfg.CPKeyspaces, Admin: n, Logger: n.cfg.Logger,
		InsecureNoAuth: n.cfg.Auth.InsecureNoAuth, Now: n.cfg.Now}
	// The token table lives in the consensus tier; without it the token
	// routes answer 501 and only the other credentials work.
	var tokens *apitoken.Store
	if n.cp != nil {
		tokens = apitoken.New(n.cp, n.cfg.Now)
		c.Tokens = tokens
	}
	if n.tls != nil {
		c.PeerTLS = n.tls.ClientConfig(peerPolicy)
	}
	if c.InsecureNoAuth {
		return c, nil
	}
	auth, err := n.authenticator(tokens)
	if err != nil {
		return c, err
	}
	c.Auth = auth
	if c.Metrics, err = authz.NewMetrics(n.cfg.Registry, "kvnode"); err != nil {
		return c, fmt.Errorf("kvnode: auth metrics: %w", err)
	}
	c.AllowedHosts = append(append([]string(nil), n.cfg.Auth.Hosts...), api.DefaultAllowedHosts...)
	if host, _, err := net.SplitHostPort(advertised); err == nil && host != "" {
		c.AllowedHosts = append(c.AllowedHosts, host)
	}
	return c, nil
}

// apiTLS is the HTTP port's TLS configuration, nil in plaintext mode: the
// server presents this node's certificate; a client certificate is
// optional but, when presented, must be a valid one of the trust domain.
func (n *Node) apiTLS() *tls.Config {
	if n.tls == nil {
		return nil
	}
	return n.tls.APIServerConfig("h2", "http/1.1")
}
