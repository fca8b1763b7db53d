package kvnode

import (
	"crypto/tls"

	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/kvnode/api"
)

// adminRoles may call /admin/v1/ on a TLS node: operators, and other
// kvnodes (a follower forwards Raft member changes to the leader).
var adminRoles = []identity.Role{identity.KVNode, identity.Operator}

// apiConfig is what the HTTP API serves. On a TLS node the admin routes
// need a kvnode or operator certificate, and calls to other nodes' APIs
// (forwarding to the Raft leader) go over https with this node's
// certificate, verifying the peer is a kvnode. Everything else is open to
// any TLS client until token authentication arrives (a later issue).
func (n *Node) apiConfig(cpEngine api.CPEngine) api.Config {
	c := api.Config{KV: n.engine(), CP: cpEngine, CPKeyspaces: n.cfg.CPKeyspaces, Admin: n}
	if n.tls != nil {
		c.AdminPolicy = &identity.Policy{TrustDomain: n.tls.TrustDomain(), Roles: adminRoles}
		c.PeerTLS = n.tls.ClientConfig(peerPolicy)
	}
	return c
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
