package cachenode_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode"
	"github.com/portico-io/portico/cachenode/bus"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlsfiles"
	"github.com/portico-io/portico/internal/tlstest"
)

// The cluster bus streams the whole dataset (SYNC) and takes slot imports:
// over mutual TLS it serves cachenode identities only, so no certificate,
// another CA's, an expired one or another role's gets a single reply.
func TestBusRequiresCacheNodeIdentity(t *testing.T) {
	port, busPort := freePort(t), freePort(t)
	id := fmt.Sprintf("%040x", 0xb0)
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	doc := fmt.Sprintf("epoch: 1\nnodes:\n  - id: %s\n    host: 127.0.0.1\n    port: %s\n    bus_port: %s\n    slots: [\"0-16383\"]\n", id, port, busPort)
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	startNode(t, withTLS(), withConfig(func(c *cachenode.Config) {
		c.RESPAddr, c.NodeID, c.ClusterConfig = "127.0.0.1:"+port, id, path
	}))
	addr := "127.0.0.1:" + busPort
	for _, tc := range nodeCA(t).Cases(t, identity.CacheNode, identity.KVNode) {
		t.Run(tc.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var err error
			c, err := bus.Peer{TLS: tc.Client}.Dial(ctx, addr)
			if err == nil {
				_, err = c.Do(ctx, []byte("SYNC"), []byte("?"), []byte(strconv.Itoa(-1)))
				c.Close()
			}
			if tc.Allowed {
				// A cachenode gets the bus's answer (here: no replication
				// stream for a node that is not its replica), not a TLS error.
				if err != nil && !isReply(err) {
					t.Fatalf("a cachenode identity was refused: %v", err)
				}
				return
			}
			if err == nil || isReply(err) {
				t.Fatalf("the bus answered: %v", err)
			}
		})
	}
	// Plaintext is refused at the handshake too.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := (bus.Peer{}).Dial(ctx, addr); err == nil {
		_, err = c.Do(ctx, []byte("PING"))
		c.Close()
		if err == nil || isReply(err) {
			t.Fatalf("a plaintext caller got an answer: %v", err)
		}
	}
}

func isReply(err error) bool {
	var re *bus.ReplyError
	return errors.As(err, &re)
}

// TestRESPOverTLS: with certificate files the RESP port speaks TLS only,
// as redis-server's tls-port with tls-auth-clients optional. A client
// without a certificate, or with a valid one of any platform role, is
// served, and AUTH decides what it may do exactly as without TLS (a
// certificate is no password); a certificate of another CA or an expired
// one fails the handshake; a plaintext client gets no RESP reply.
func TestRESPOverTLS(t *testing.T) {
	n := startNode(t, withTLS(), withNamespaces(t, "namespaces:\n  app: {secret: s}\n"), withConfig(func(c *cachenode.Config) {
		c.RequireAuth = true
	}))
	p := nodeCA(t)
	want := map[string]bool{"no client certificate": true, "another CA": false, "expired": false,
		"wrong role " + string(identity.Gateway): true, "role " + string(identity.CacheNode): true}
	cases := p.Cases(t, identity.CacheNode, identity.Gateway)
	for _, role := range identity.Roles { // every platform role is a client like any other
		files := p.Files(t, role, "client-"+string(role))
		cert, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, tlstest.Case{Name: "platform role " + string(role), Client: p.ClientTLS([]tls.Certificate{cert})})
		want["platform role "+string(role)] = true
	}
	for _, tc := range cases {
		served, ok := want[tc.Name]
		if !ok {
			t.Fatalf("refusal table case %q has no expectation here", tc.Name)
		}
		t.Run(tc.Name, func(t *testing.T) {
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", n.addrs.RESP, tc.Client)
			if err == nil {
				// TLS 1.3: the server's verdict on a client certificate
				// arrives with the first read.
				rc := &rawConn{c: c, r: bufio.NewReader(c)}
				defer c.Close()
				var got []string
				for _, args := range [][]string{{"PING"}, {"GET", "k"}, {"AUTH", "app", "wrong"}, {"AUTH", "app", "s"}, {"SET", "k", "v"}, {"GET", "k"}} {
					r, rerr := rc.try(args...)
					if rerr != nil {
						err = rerr
						break
					}
					got = append(got, r)
				}
				if err == nil {
					if !served {
						t.Fatalf("served: %q", got)
					}
					if w := []string{"-NOAUTH Authentication required.\r\n", "-NOAUTH Authentication required.\r\n",
						"-WRONGPASS invalid username-password pair or user is disabled.\r\n", "+OK\r\n", "+OK\r\n", "$1\r\nv\r\n"}; fmt.Sprint(got) != fmt.Sprint(w) {
						t.Fatalf("replies over TLS %q, want %q", got, w)
					}
					return
				}
			}
			if served {
				t.Fatalf("refused: %v", err)
			}
		})
	}
	// Plaintext: the bytes are no TLS handshake; no RESP reply comes back.
	c, err := net.DialTimeout("tcp", n.addrs.RESP, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc := &rawConn{c: c, r: bufio.NewReader(c)}
	if r, err := rc.try("PING"); err == nil {
		t.Fatalf("a plaintext client got a RESP reply %q", r)
	}
}

// TestRunRefusesWithoutTLS: secure by default. A node with neither
// certificate files nor InsecurePlaintext does not start, in any mode,
// and says what to pass.
func TestRunRefusesWithoutTLS(t *testing.T) {
	for _, cfg := range []cachenode.Config{
		{RESPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0"},
		{RESPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", ClusterKVAddrs: []string{"127.0.0.1:1"}, ClusterName: "c"},
	} {
		err := cachenode.Run(context.Background(), cfg)
		if !errors.Is(err, tlsfiles.ErrNoFiles) || !strings.Contains(err.Error(), "--tls-cert-file") || !strings.Contains(err.Error(), "--insecure-plaintext") {
			t.Fatalf("Run without TLS files = %v, want tlsfiles.ErrNoFiles naming the flags", err)
		}
	}
}
