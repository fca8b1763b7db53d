package server

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode/command"
	"github.com/portico-io/portico/cachenode/namespace"
)

func TestMaxClientsAndQuit(t *testing.T) {
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		return c, bufio.NewReader(c)
	}
	c1, r1 := dial()
	defer c1.Close()
	c1.Write([]byte("PING\r\n"))
	if l, _ := r1.ReadString('\n'); l != "+PONG\r\n" {
		t.Fatalf("first client: %q", l)
	}
	if srv.Clients() != 1 {
		t.Fatalf("Clients() = %d", srv.Clients())
	}
	c2, r2 := dial()
	defer c2.Close()
	if l, _ := r2.ReadString('\n'); l != "-ERR max number of clients reached\r\n" {
		t.Fatalf("second client: %q", l)
	}
	// QUIT replies, then the server closes the connection.
	c1.Write([]byte("QUIT\r\nPING\r\n"))
	if l, _ := r1.ReadString('\n'); l != "+OK\r\n" {
		t.Fatalf("QUIT: %q", l)
	}
	if l, err := r1.ReadString('\n'); err == nil {
		t.Fatalf("connection still open after QUIT: %q", l)
	}
}
