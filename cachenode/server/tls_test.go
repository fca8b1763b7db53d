package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode/command"
	"github.com/portico-io/portico/cachenode/namespace"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlstest"
)

// TestMaxClientsOverTLS: over a TLS listener the refusal of a client past
// MaxClients waits for its handshake; a client that never sends one must
// not hold up the accept loop (the next one is refused at once), and is
// dropped after a second.
func TestMaxClientsOverTLS(t *testing.T) {
	p := tlstest.New(t)
	eng, err := command.New(command.Config{Registry: namespace.NewRegistry(namespace.RegistryConfig{})})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Engine: eng, MaxClients: 1})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- srv.Serve(ctx, tls.NewListener(lis, p.Load(t, identity.CacheNode, "node").APIServerConfig()))
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	dialTLS := func() (net.Conn, *bufio.Reader) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, p.ClientTLS(nil))
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		return c, bufio.NewReader(c)
	}
	c1, r1 := dialTLS()
	defer c1.Close()
	c1.Write([]byte("PING\r\n"))
	if l, _ := r1.ReadString('\n'); l != "+PONG\r\n" {
		t.Fatalf("first client: %q", l)
	}
	silent, err := net.Dial("tcp", addr) // past MaxClients, and no ClientHello
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// The next client past the limit is refused at once, not after the
	// silent one.
	c2, r2 := dialTLS()
	defer c2.Close()
	if l, err := r2.ReadString('\n'); l != "-ERR max number of clients reached\r\n" {
		t.Fatalf("a client after the silent one: %q, %v", l, err)
	}
	// And the silent one is dropped within a second.
	silent.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the silent client is still connected: %v", err)
	}
}
