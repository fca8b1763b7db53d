package failover

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlsfiles"
	"github.com/portico-io/portico/internal/tlstest"
)

// pongServer answers +PONG to every line on a RESP port over TLS with
// files' certificate (client certificates optional, as a node's RESP
// port); with files nil it accepts and never answers (a frozen process:
// the kernel completes the TCP handshake, nobody the TLS one).
func pongServer(t *testing.T, files *tlsfiles.Files) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	if files != nil {
		l = tls.NewListener(l, files.APIServerConfig())
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			if files == nil {
				continue
			}
			go func() {
				r := bufio.NewReader(c)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					if r.Buffered() == 0 {
						if _, err := c.Write([]byte("+PONG\r\n")); err != nil {
							return
						}
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// TestPingerTLS: the default probe reaches nodes whose RESP port speaks
// TLS, presenting this node's certificate and checking the peer is a
// cachenode; a plaintext probe, an impostor or a frozen peer is down.
func TestPingerTLS(t *testing.T) {
	p := tlstest.New(t)
	self := p.Load(t, identity.CacheNode, "cache-0").ClientConfig(identity.Policy{Roles: []identity.Role{identity.CacheNode}})
	node := pongServer(t, p.Load(t, identity.CacheNode, "cache-1"))
	impostor := pongServer(t, p.Load(t, identity.KVNode, "kv-0"))
	frozen := pongServer(t, nil)
	probe := func(pg *Pinger, addr string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		return pg.Probe(ctx, addr)
	}
	pg := &Pinger{TLS: self}
	defer pg.Close()
	for range 2 { // the second on the kept connection
		if err := probe(pg, node); err != nil {
			t.Fatalf("a cachenode over TLS: %v", err)
		}
	}
	for name, addr := range map[string]string{"impostor": impostor, "frozen": frozen} {
		if err := probe(pg, addr); err == nil {
			t.Errorf("%s: probe succeeded", name)
		}
	}
	plain := &Pinger{}
	defer plain.Close()
	if err := probe(plain, node); err == nil {
		t.Error("a plaintext probe of a TLS port succeeded")
	}
}
