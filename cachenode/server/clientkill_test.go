//go:build linux

package server

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode/command"
	"github.com/portico-io/portico/internal/eventually"
)

// clientID asks c for its CLIENT ID.
func clientID(t *testing.T, c net.Conn, r interface{ ReadString(byte) (string, error) }) string {
	t.Helper()
	if _, err := c.Write([]byte("CLIENT ID\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, ":") {
		t.Fatalf("CLIENT ID: %q, %v", line, err)
	}
	return strings.TrimSpace(line[1:])
}

// TestClientKillFreesABlockedClient: a killed client leaves the wait
// queues at once, as Redis frees it: a push right after the kill stays in
// the list instead of going to a connection that is only closing.
func TestClientKillFreesABlockedClient(t *testing.T) {
	for _, mode := range loopModes {
		t.Run(mode.String(), func(t *testing.T) {
			addr, srv, _ := startServer(t, command.Config{}, mode.apply)
			admin, ar := dial(t, addr)
			b, br := dial(t, addr)
			id := clientID(t, b, br)
			b.Write([]byte("BLPOP q 0\r\n"))
			eventually.True(t, 5*time.Second, "blocked", func() bool { return srv.cfg.Engine.BlockedClients() == 1 })
			admin.Write([]byte("CLIENT KILL ID " + id + "\r\nRPUSH q v\r\nLLEN q\r\n"))
			expect(t, ar, ":1\r\n:1\r\n:1\r\n")
			expectClosed(t, br)
		})
	}
}

// TestMutualClientKill: two clients that CLIENT KILL each other at the
// same moment both end (or answer); neither waits for the other. A kill
// used to close the victim's socket, which waits for the victim's
// goroutine to leave its read callback, where it was closing the first.
func TestMutualClientKill(t *testing.T) {
	for _, mode := range loopModes[:3] {
		t.Run(mode.String(), func(t *testing.T) {
			addr, _, _ := startServer(t, command.Config{}, mode.apply)
			for round := range 30 {
				var cs [2]net.Conn
				var ids [2]string
				for i := range 2 {
					c, r := dial(t, addr)
					cs[i], ids[i] = c, clientID(t, c, r)
				}
				var wg sync.WaitGroup
				for i := range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						cs[i].Write([]byte(strings.Repeat("PING\r\n", 2000) + "CLIENT KILL ID " + ids[1-i] + "\r\n"))
					}()
				}
				wg.Wait()
				// Each is then closed (killed) or alive: the end, or the echo.
				for i := range 2 {
					cs[i].Write([]byte("ECHO endmark\r\n"))
					var got []byte
					buf := make([]byte, 1<<16)
					for !strings.Contains(string(got), "endmark") {
						n, err := cs[i].Read(buf)
						got = append(got, buf[:n]...)
						if ne, ok := err.(net.Error); ok && ne.Timeout() {
							t.Fatalf("round %d: connection %d neither answered nor closed", round, i)
						}
						if err != nil {
							break
						}
					}
					cs[i].Close()
				}
			}
		})
	}
}
