package server

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode/command"
)

// loopModes: a goroutine per connection, one event loop, several.
var loopModes = []int{-1, 1, 3}

// TestLoopModesServeAndEnd: in every mode, concurrent pipelining clients
// get their replies in order, a half-close after commands gets them and
// then the end, and every session ends.
func TestLoopModesServeAndEnd(t *testing.T) {
	for _, loops := range loopModes {
		t.Run(fmt.Sprint("loops=", loops), func(t *testing.T) {
			addr, srv, _ := startServer(t, command.Config{}, func(c *Config) { c.Loops = loops })
			done := make(chan struct{})
			for i := range 20 {
				go func() {
					defer func() { done <- struct{}{} }()
					c, r := dial(t, addr)
					k := fmt.Sprint("k", i)
					c.Write([]byte(strings.Repeat("SET "+k+" v\r\nGET "+k+"\r\n", 100)))
					expect(t, r, strings.Repeat("+OK\r\n$1\r\nv\r\n", 100))
					c.Write([]byte("PING\r\n"))
					c.(*net.TCPConn).CloseWrite()
					expect(t, r, "+PONG\r\n")
					expectClosed(t, r)
				}()
			}
			for range 20 {
				<-done
			}
			waitClients(t, srv, 0)
		})
	}
}

// TestLoopMovesBlockedClient: a blocking command on a loop's connection
// waits in a goroutine of its own, does not hold up the loop's other
// connections, and is served, then runs the commands pipelined after it.
func TestLoopMovesBlockedClient(t *testing.T) {
	for _, loops := range loopModes {
		t.Run(fmt.Sprint("loops=", loops), func(t *testing.T) {
			addr, _, _ := startServer(t, command.Config{}, func(c *Config) { c.Loops = loops })
			b, br := dial(t, addr)
			b.Write([]byte("PING\r\nBLPOP q 0\r\nECHO after\r\n"))
			expect(t, br, "+PONG\r\n")
			p, pr := dial(t, addr)
			for range 3 {
				p.Write([]byte("PING\r\n"))
				expect(t, pr, "+PONG\r\n")
			}
			p.Write([]byte("RPUSH q x\r\n"))
			expect(t, pr, ":1\r\n")
			expect(t, br, "*2\r\n$1\r\nq\r\n$1\r\nx\r\n$5\r\nafter\r\n")
			b.Write([]byte("PING\r\n"))
			expect(t, br, "+PONG\r\n")
		})
	}
}

// TestLoopClientKillAndTimeout: CLIENT KILL and CONFIG SET timeout close
// a loop's connection.
func TestLoopClientKillAndTimeout(t *testing.T) {
	for _, loops := range loopModes {
		t.Run(fmt.Sprint("loops=", loops), func(t *testing.T) {
			addr, srv, _ := startServer(t, command.Config{}, func(c *Config) { c.Loops = loops; c.IdleCheck = 50 * time.Millisecond })
			victim, vr := dial(t, addr)
			victim.Write([]byte("CLIENT ID\r\n"))
			line, err := vr.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			id := strings.TrimSpace(strings.TrimPrefix(line, ":"))
			killer, kr := dial(t, addr)
			killer.Write([]byte("CLIENT KILL ID " + id + "\r\n"))
			expect(t, kr, ":1\r\n")
			expectClosed(t, vr)

			killer.Write([]byte("CONFIG SET timeout 1\r\n"))
			expect(t, kr, "+OK\r\n")
			idle, ir := dial(t, addr)
			idle.Write([]byte("PING\r\n"))
			expect(t, ir, "+PONG\r\n")
			start := time.Now()
			expectClosed(t, ir) // waits on the read: the server closes it
			if d := time.Since(start); d < 900*time.Millisecond {
				t.Errorf("closed after %v idle, timeout 1 s", d)
			}
			waitClients(t, srv, 0) // the killer too: idle past the timeout
		})
	}
}

// waitClients polls Clients() until it is n (the sessions end after the
// sockets close).
func waitClients(t *testing.T, srv *Server, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for srv.Clients() != n {
		if time.Now().After(deadline) {
			t.Fatalf("Clients() = %d, want %d", srv.Clients(), n)
		}
		time.Sleep(5 * time.Millisecond) // polling a counter, not timing the server
	}
}
