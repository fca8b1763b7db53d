package kvnode

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/authz"
	"github.com/portico-io/portico/kvnode/api"
	"github.com/portico-io/portico/kvnode/apitoken"
)

// withToken is the header sending tok instead of the test admin token.
func withToken(tok string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + tok}
}

// mint creates a token through node id's API as the test admin and returns
// the creation answer and the revision it was written at.
func (c *cluster) mint(id, body string) (api.CreatedToken, uint64) {
	c.t.Helper()
	r := c.cpDo("POST", id, api.TokensPrefix, []byte(body), nil, http.StatusCreated)
	var ct api.CreatedToken
	if err := json.Unmarshal(r.body, &ct); err != nil || ct.Secret == "" {
		c.t.Fatalf("creation answer %s: %v", r.body, err)
	}
	return ct, r.rev()
}

// applied waits until node id has applied revision rev of the Raft log.
func (c *cluster) applied(id string, rev uint64) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	if err := c.node(id).CP().WaitApplied(ctx, rev); err != nil {
		c.t.Fatalf("%s applying revision %d: %v", id, rev, err)
	}
}

// API tokens minted through /admin/v1/tokens live in the Raft group: an
// admin mints a token confined to keyspace orders on a follower, which may
// then read and write orders on every node (once applied) and nothing
// else; a viewer's keyspace token only reads; a security admin cannot mint
// an admin token; the secret is only in the creation answer and the tokens'
// keyspace is closed to data routes; a revocation is in force at once on
// the node that answered it and on another node once it applied it; an
// expired token is refused.
func TestAPITokensThroughTheRaftGroup(t *testing.T) {
	c := newCPCluster(t, "locks")
	leader := c.cpLeader()
	var followers []string
	for _, id := range c.ids() {
		if id != leader {
			followers = append(followers, id)
		}
	}
	answering, other := followers[0], followers[1]

	// Minted on a follower: forwarded to the leader, usable at once on the
	// follower (it waited to apply the write), and on the other follower
	// once it has applied it.
	r := c.cpDo("POST", answering, api.TokensPrefix, []byte(`{"name":"orders-app","roles":["editor"],"keyspaces":["orders"]}`), nil, http.StatusCreated)
	if r.header.Get(api.HeaderForwarded) != leader {
		t.Fatalf("creation on follower %s answered by %q, want the leader %s", answering, r.header.Get(api.HeaderForwarded), leader)
	}
	var orders api.CreatedToken
	if err := json.Unmarshal(r.body, &orders); err != nil || !strings.HasPrefix(orders.Secret, "ptk_"+orders.ID+"_") ||
		strings.Join(orders.Keyspaces, ",") != "orders" || orders.CreatedBy == "" {
		t.Fatalf("creation answer %s: %v", r.body, err)
	}
	tok := withToken(orders.Secret)
	c.mustDo("PUT", answering, "/v1/kv/orders:1?consistency=ALL", []byte("v1"), tok, http.StatusOK)
	c.applied(other, r.rev())
	for _, id := range c.ids() {
		if g := c.mustDo("GET", id, "/v1/kv/orders:1", nil, tok, http.StatusOK); string(g.body) != "v1" {
			t.Fatalf("orders:1 on %s = %q", id, g.body)
		}
	}
	// Confined: no other keyspace, no cluster or admin route, no token API.
	for _, tc := range []struct{ method, path string }{
		{"PUT", "/v1/kv/users:1"},
		{"GET", "/v1/kv/users:1"},
		{"PUT", "/v1/cp/locks/a"},
		{"GET", "/admin/v1/members"},
		{"POST", "/admin/v1/join"},
		{"POST", "/admin/v1/decommission"},
		{"GET", "/admin/v1/cp/members"},
		{"GET", "/v1/ring"},
		{"GET", api.TokensPrefix},
		{"POST", api.TokensPrefix},
	} {
		r := c.mustDo(tc.method, other, tc.path, []byte(`{"name":"x","roles":["editor"]}`), tok, http.StatusForbidden)
		if e := r.errBody(t); e.Code != authz.ResultForbidden {
			t.Fatalf("%s %s: %+v", tc.method, tc.path, e)
		}
	}

	// A viewer's token for orders reads but does not write.
	viewer, _ := c.mint(leader, `{"name":"orders-reader","roles":["viewer"],"keyspaces":["orders"]}`)
	c.mustDo("GET", leader, "/v1/kv/orders:1", nil, withToken(viewer.Secret), http.StatusOK)
	c.mustDo("PUT", leader, "/v1/kv/orders:1", []byte("x"), withToken(viewer.Secret), http.StatusForbidden)

	// No escalation: a security admin mints a viewer token, not an admin's.
	sec := withToken(testTokens.Token(authz.SecurityAdmin))
	if r := c.mustDo("POST", answering, api.TokensPrefix, []byte(`{"name":"root","roles":["admin"]}`), sec, http.StatusForbidden); r.errBody(t).Field != "roles" {
		t.Fatalf("escalation refused without naming roles: %s", r.body)
	}
	opsRev := c.cpDo("POST", answering, api.TokensPrefix, []byte(`{"name":"ops-viewer","roles":["viewer"]}`), sec, http.StatusCreated).rev()

	// The secret and the hash appear in no read answer, on any node; the
	// keyspace holding them is closed to data routes, admins included.
	for _, id := range c.ids() {
		for _, path := range []string{api.TokensPrefix, api.TokensPrefix + "/" + orders.ID} {
			body := string(c.mustDo("GET", id, path, nil, sec, http.StatusOK).body)
			if !strings.Contains(body, orders.ID) || strings.Contains(body, orders.Secret) || strings.Contains(body, orders.Secret[len("ptk_")+17:]) ||
				strings.Contains(body, `"token"`) || strings.Contains(body, `"hash"`) {
				t.Fatalf("GET %s on %s shows more than metadata: %s", path, id, body)
			}
		}
		for _, path := range []string{"/v1/cp/" + apitoken.Keyspace + "/" + orders.ID, "/v1/kv/" + apitoken.Keyspace + ":" + orders.ID} {
			if r := c.mustDo("GET", id, path, nil, nil, http.StatusForbidden); r.errBody(t).Code != "reserved_keyspace" {
				t.Fatalf("GET %s as admin: %s", path, r.body)
			}
		}
	}
	// Reads answer from the node's applied state: the list on the other
	// follower is complete once it has applied the last creation.
	c.applied(other, opsRev)
	var list api.TokenList
	if err := json.Unmarshal(c.mustDo("GET", other, api.TokensPrefix, nil, nil, http.StatusOK).body, &list); err != nil || len(list.Items) != 3 {
		t.Fatalf("list: %+v %v", list, err)
	}

	// Revoked on a follower: refused at once there and on the leader, and
	// on the other follower once it has applied the revocation.
	r = c.cpDo("DELETE", answering, api.TokensPrefix+"/"+orders.ID, nil, nil, http.StatusOK)
	var revoked apitoken.Token
	if err := json.Unmarshal(r.body, &revoked); err != nil || revoked.RevokedAt == nil || revoked.RevokedBy == "" {
		t.Fatalf("revocation answer %s: %v", r.body, err)
	}
	c.mustDo("PUT", answering, "/v1/kv/orders:2", []byte("v"), tok, http.StatusUnauthorized)
	c.mustDo("GET", leader, "/v1/kv/orders:1", nil, tok, http.StatusUnauthorized)
	c.applied(other, r.rev())
	c.mustDo("GET", other, "/v1/kv/orders:1", nil, tok, http.StatusUnauthorized)
	if rev, _ := strconv.ParseUint(r.header.Get(api.HeaderRevision), 10, 64); rev == 0 {
		t.Fatal("revocation answered without its revision")
	}

	// Expired: accepted until its expiry, refused after, on every node.
	exp := c.clock.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	short, rev := c.mint(other, `{"name":"short","roles":["viewer"],"keyspaces":["orders"],"expiresAt":"`+exp+`"}`)
	for _, id := range c.ids() {
		c.applied(id, rev)
		c.mustDo("GET", id, "/v1/kv/orders:1", nil, withToken(short.Secret), http.StatusOK)
	}
	c.clock.Advance(2 * time.Hour)
	for _, id := range c.ids() {
		c.mustDo("GET", id, "/v1/kv/orders:1", nil, withToken(short.Secret), http.StatusUnauthorized)
	}
}
