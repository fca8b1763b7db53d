// Package kvtest runs a kvnode consensus group for cachenode's tests: three
// real kvnode processes (built from this module with go build) on loopback
// ports, every node bootstrapping the same three Raft voters and declaring
// the given CP keyspaces, as make run starts them.
//
// Start runs them in plaintext without authentication (--insecure-plaintext
// --insecure-no-auth, both debugging-only flags): the cache's tests that
// are not about TLS. StartWith a PKI gives every node a kvnode certificate
// of that CA, as make run does, so cache nodes of the same CA call them
// over TLS and authenticate with their cachenode certificates, which the
// nodes confine to the group's keyspaces (--cachenode-keyspaces); URLs says
// which scheme the nodes serve, so the same test runs against either.
package kvtest

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode/internal/proctest"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlstest"
)

// Binary builds kvnode once per test process and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	return proctest.Build(t, "./kvnode/cmd/kvnode", "kvnode")
}

// Options configure StartWith.
type Options struct {
	// Keyspaces are the CP keyspaces the nodes declare (at least one).
	Keyspaces []string
	// PKI, when set, gives each node a kvnode certificate of this CA:
	// internode gRPC, Raft and the HTTP API on TLS, the API admitting
	// operator certificates as admins and cachenode certificates to
	// Keyspaces. Without, the nodes run --insecure-plaintext
	// --insecure-no-auth.
	PKI *tlstest.PKI
}

// Group is a running 3-node kvnode group.
type Group struct {
	t         testing.TB
	bin       string
	HTTPAddrs []string // host:port, by node index
	// URLs are the HTTP API's base URLs by node index, with the scheme
	// the nodes serve: https:// or http://. Pass them (not HTTPAddrs) to
	// clients that must work against both.
	URLs []string
	// TLS is a client configuration for a group started with a PKI: an
	// operator certificate of it, the server's kvnode identity checked.
	TLS       *tls.Config
	opts      Options
	ids       []string
	procs     []*proctest.Proc // output appended to a log file across restarts
	hc        *http.Client     // kvtest's own calls (2 s timeout)
	scheme    string           // "http" or "https"; "" until known
	schemeErr error
}

// Start runs three kvnodes declaring keyspaces CP and returns once a Raft
// leader is known to all of them; they are killed when the test ends. The
// ports are picked free and then bound by the processes, so another
// process can take one in between: a group that does not come up is
// replaced by one on new ports (three attempts).
func Start(t testing.TB, keyspaces ...string) *Group {
	t.Helper()
	return StartWith(t, Options{Keyspaces: keyspaces})
}

// StartWith is Start with options.
func StartWith(t testing.TB, opts Options) *Group {
	t.Helper()
	if len(opts.Keyspaces) == 0 {
		t.Fatal("kvtest.Start: no CP keyspace")
	}
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		g := &Group{t: t, bin: Binary(t), opts: opts, scheme: "http", hc: &http.Client{Timeout: 2 * time.Second}}
		if opts.PKI != nil {
			g.TLS = opts.PKI.Load(t, identity.Operator, "kvtest-operator").ClientConfig(identity.Policy{Roles: []identity.Role{identity.KVNode}})
			g.scheme = ""
			g.hc.Transport = &http.Transport{TLSClientConfig: g.TLS}
		}
		g.launch()
		if _, err = g.waitLeader(30 * time.Second); err == nil {
			for _, a := range g.HTTPAddrs {
				g.URLs = append(g.URLs, g.scheme+"://"+a)
			}
			t.Cleanup(g.killAll)
			return g
		}
		g.killAll()
		t.Logf("kvtest: attempt %d: %v", attempt, err)
	}
	t.Fatalf("kvtest: no kvnode group came up: %v", err)
	return nil
}

func (g *Group) launch() {
	t := g.t
	var peers []string
	dir := t.TempDir()
	// Outside the ephemeral range (testdeps.FreeAddrs), so no outgoing
	// connection takes one before its node binds it.
	addrs := testdeps.FreeAddrs(t, 9)
	grpc, raft := addrs[3:6], addrs[6:9]
	g.HTTPAddrs = addrs[0:3]
	for i := range 3 {
		g.ids = append(g.ids, fmt.Sprintf("kv-%d", i))
		peers = append(peers, g.ids[i]+"="+raft[i])
	}
	for i := range 3 {
		security := []string{"--insecure-plaintext", "--insecure-no-auth"}
		if g.opts.PKI != nil {
			tc := g.opts.PKI.Files(t, identity.KVNode, g.ids[i])
			security = []string{"--tls-cert-file=" + tc.CertFile, "--tls-key-file=" + tc.KeyFile, "--tls-ca-file=" + tc.CAFile,
				"--cachenode-keyspaces=" + strings.Join(g.opts.Keyspaces, ",")}
		}
		var seeds []string
		for j := range 3 {
			if j != i {
				seeds = append(seeds, grpc[j])
			}
		}
		g.procs = append(g.procs, &proctest.Proc{Name: g.ids[i], Bin: g.bin, Log: filepath.Join(dir, g.ids[i]+".log"), Args: append([]string{"--log-format=text", "--log-level=warn", "--node-id=" + g.ids[i],
			"--http-addr=" + g.HTTPAddrs[i], "--grpc-addr=" + grpc[i], "--data-dir=" + filepath.Join(dir, g.ids[i]),
			"--seeds=" + strings.Join(seeds, ","), "--startup-wait=1s", "--raft-addr=" + raft[i],
			"--raft-bootstrap", "--raft-peers=" + strings.Join(peers, ","), "--cp-keyspaces=" + strings.Join(g.opts.Keyspaces, ",")}, security...)})
		g.start(i)
	}
}

func (g *Group) killAll() {
	for i := range g.procs {
		g.Kill(i)
	}
}

func (g *Group) start(i int) {
	if err := g.procs[i].Start(); err != nil {
		g.t.Fatal(err)
	}
}

// Kill SIGKILLs node i (no-op when it is not running).
func (g *Group) Kill(i int) { g.procs[i].Kill() }

// Restart starts a killed node i again with its data.
func (g *Group) Restart(i int) { g.start(i) }

// alive reports whether node i was started and not killed; died reports
// one that ended by itself (its log tail in the error).
func (g *Group) alive(i int) bool { return g.procs[i].Running() }

func (g *Group) died() error {
	for _, p := range g.procs {
		if err := p.Exited(); err != nil {
			return err
		}
	}
	return nil
}

// Leader is the index of the node a running node reports as Raft leader,
// or -1.
func (g *Group) Leader() int {
	if !g.detectScheme() {
		return -1
	}
	for i, a := range g.HTTPAddrs {
		if !g.alive(i) {
			continue
		}
		resp, err := g.hc.Get(g.scheme + "://" + a + "/admin/v1/cp/members")
		if err != nil {
			continue
		}
		var body struct {
			Items []struct {
				ID     string `json:"id"`
				Leader bool   `json:"leader"`
			} `json:"items"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			continue
		}
		for _, m := range body.Items {
			if !m.Leader {
				continue
			}
			for j, id := range g.ids {
				if id == m.ID && g.alive(j) {
					return j
				}
			}
		}
	}
	return -1
}

// WaitLeader waits until a running node leads and every running node
// serves a linearizable CP read (not 503), and returns the leader's index;
// it fails the test after d or when a node died by itself.
func (g *Group) WaitLeader(d time.Duration) int {
	g.t.Helper()
	l, err := g.waitLeader(d)
	if err != nil {
		g.t.Fatal(err)
	}
	return l
}

// detectScheme finds, in a group with a PKI, whether the nodes serve their
// API over TLS: false while no node answers.
func (g *Group) detectScheme() bool {
	if g.scheme != "" {
		return true
	}
	for i, a := range g.HTTPAddrs {
		if !g.alive(i) {
			continue
		}
		resp, err := g.hc.Get("https://" + a + "/healthz")
		switch {
		case err == nil:
			resp.Body.Close()
			g.scheme = "https"
			return true
		case errors.Is(err, http.ErrSchemeMismatch):
			g.scheme = "http"
			return true
		default:
			g.schemeErr = err
		}
	}
	return false
}

func (g *Group) waitLeader(d time.Duration) (int, error) {
	deadline := time.Now().Add(d)
	for {
		if err := g.died(); err != nil {
			return -1, err
		}
		if l := g.Leader(); l >= 0 {
			ok := true
			for i, a := range g.HTTPAddrs {
				if !g.alive(i) {
					continue
				}
				resp, err := g.hc.Get(g.scheme + "://" + a + "/v1/cp/" + g.opts.Keyspaces[0] + "/kvtest-probe")
				if err != nil {
					ok = false
					break
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout {
					ok = false
				}
			}
			if ok {
				return l, nil
			}
		}
		if time.Now().After(deadline) {
			var tails strings.Builder
			for i, p := range g.procs {
				fmt.Fprintf(&tails, "\n%s: %s", g.ids[i], p.Tail(800))
			}
			if g.scheme == "" {
				fmt.Fprintf(&tails, "\n(no node answered https or http: %v)", g.schemeErr)
			}
			return -1, fmt.Errorf("no kvnode Raft leader serving after %s; logs:%s", d, tails.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
