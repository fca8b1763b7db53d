package server

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode/command"
)

func TestMaxClientsAndQuit(t *testing.T) {
	addr, srv, _ := startServer(t, command.Config{}, func(c *Config) { c.MaxClients = 1 })
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
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
