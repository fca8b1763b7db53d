package cachenode_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/xdstest"
)

// closedByServer reports whether the server closed rc (EOF or reset)
// within d; a read that times out means it is still open.
func closedByServer(t *testing.T, rc *rawConn, d time.Duration) bool {
	t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(d))
	_, err := rc.r.ReadByte()
	if err == nil {
		t.Fatal("a killed connection got data")
	}
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

// field returns a CLIENT LIST line's value of name.
func field(line, name string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v
		}
	}
	return ""
}

// TestClientListKillUnblock: CLIENT LIST lists every connection with its
// name, namespace (user=) and blocked flag; CLIENT KILL closes by ID, by
// ADDR, by USER (namespace) and by LADDR, skipping the caller unless
// SKIPME no (then the caller's connection closes after the reply); the
// old CLIENT KILL addr:port form; a killed blocked client leaves the
// queues. (The replies that do not depend on client ids are compared with
// redis-server in TestConformanceWithRedisServer and, for CLIENT UNBLOCK,
// TestBlockingZsetConformWithRedisServer.)
func TestClientListKillUnblock(t *testing.T) {
	n := startNode(t, withNamespaces(t, `
namespaces:
  tenant: {secret: st}
`))
	admin := dialRaw(t, n.addrs.RESP)
	admin.do(t, "CLIENT", "SETNAME", "admin")
	conns := map[string]*rawConn{}
	ids := map[string]string{}
	for _, name := range []string{"blocked", "byaddr", "tenant", "other"} {
		rc := dialRaw(t, n.addrs.RESP)
		rc.do(t, "CLIENT", "SETNAME", name)
		if name == "tenant" {
			if got := rc.do(t, "AUTH", "tenant", "st"); got != "+OK\r\n" {
				t.Fatalf("AUTH = %q", got)
			}
		}
		conns[name] = rc
		ids[name] = strings.TrimSuffix(strings.TrimPrefix(rc.do(t, "CLIENT", "ID"), ":"), "\r\n")
	}
	conns["blocked"].send(t, "BLPOP", "never", "0")
	c := n.client(t)
	waitBlockedClients(t, c, 1)

	list := func() map[string]string { // name -> line
		out := map[string]string{}
		body := admin.do(t, "CLIENT", "LIST")
		for _, l := range strings.Split(body, "\n") {
			if name := field(l, "name"); name != "" {
				out[name] = l
			}
		}
		return out
	}
	lines := list()
	for _, name := range []string{"admin", "blocked", "byaddr", "tenant", "other"} {
		if lines[name] == "" {
			t.Fatalf("CLIENT LIST has no %s: %v", name, lines)
		}
	}
	if f := field(lines["blocked"], "flags"); f != "b" {
		t.Fatalf("blocked client's flags = %q", f)
	}
	if u := field(lines["tenant"], "user"); u != "tenant" {
		t.Fatalf("tenant's user = %q", u)
	}
	if got := admin.do(t, "CLIENT", "LIST", "ID", ids["other"], "999999"); field(got, "name") != "other" || strings.Count(got, "id=") != 1 {
		t.Fatalf("CLIENT LIST ID other = %q", got)
	}

	// By ID: the blocked client; it leaves the queues.
	if got := admin.do(t, "CLIENT", "KILL", "ID", ids["blocked"]); got != ":1\r\n" {
		t.Fatalf("CLIENT KILL ID = %q", got)
	}
	if !closedByServer(t, conns["blocked"], 5*time.Second) {
		t.Fatal("the killed client's connection is open")
	}
	waitBlockedClients(t, c, 0)
	// By ADDR, and the old form by address.
	addr := field(lines["byaddr"], "addr")
	if got := admin.do(t, "CLIENT", "KILL", "ADDR", addr); got != ":1\r\n" {
		t.Fatalf("CLIENT KILL ADDR = %q", got)
	}
	if !closedByServer(t, conns["byaddr"], 5*time.Second) {
		t.Fatal("the client killed by ADDR is open")
	}
	if got := admin.do(t, "CLIENT", "KILL", addr); got != "-ERR No such client\r\n" {
		// Killed already (its session may take a moment to leave): it is
		// gone or going, never killed twice.
		xdstest.Eventually(t, 5*time.Second, "the killed client to leave CLIENT LIST", func() bool {
			return admin.do(t, "CLIENT", "KILL", addr) == "-ERR No such client\r\n"
		})
	}
	// By USER (the namespace): only the tenant's connection.
	if got := admin.do(t, "CLIENT", "KILL", "USER", "tenant"); got != ":1\r\n" {
		t.Fatalf("CLIENT KILL USER tenant = %q", got)
	}
	if !closedByServer(t, conns["tenant"], 5*time.Second) {
		t.Fatal("the tenant's connection is open")
	}
	if closedByServer(t, conns["other"], 50*time.Millisecond) {
		t.Fatal("CLIENT KILL USER tenant closed a default-namespace client")
	}
	// The old form kills the caller too (no SKIPME there): after its +OK.
	self := dialRaw(t, n.addrs.RESP)
	selfAddr := ""
	for _, l := range strings.Split(self.do(t, "CLIENT", "INFO"), "\n") {
		if a := field(l, "addr"); a != "" {
			selfAddr = a
		}
	}
	if got := self.do(t, "CLIENT", "KILL", selfAddr); got != "+OK\r\n" {
		t.Fatalf("CLIENT KILL own addr = %q", got)
	}
	if !closedByServer(t, self, 5*time.Second) {
		t.Fatal("a client that killed itself stays connected")
	}
	// LADDR (every client of this listener) skips the caller by default.
	if got := admin.do(t, "CLIENT", "KILL", "LADDR", n.addrs.RESP); got == ":0\r\n" || !strings.HasPrefix(got, ":") {
		t.Fatalf("CLIENT KILL LADDR = %q, want the other clients", got)
	}
	if !closedByServer(t, conns["other"], 5*time.Second) {
		t.Fatal("CLIENT KILL LADDR left a client")
	}
	if got := admin.do(t, "PING"); got != "+PONG\r\n" {
		t.Fatalf("the caller after CLIENT KILL LADDR: %q", got)
	}
	// SKIPME no: the caller too, after the reply.
	if got := admin.do(t, "CLIENT", "KILL", "USER", "default", "SKIPME", "no"); !strings.HasPrefix(got, ":") || got == ":0\r\n" {
		t.Fatalf("CLIENT KILL USER default SKIPME no = %q", got)
	}
	if !closedByServer(t, admin, 5*time.Second) {
		t.Fatal("SKIPME no left the caller connected")
	}
}
