//go:build linux

package server

import (
	"bufio"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode/command"
	"github.com/portico-io/portico/internal/eventually"
)

// loopMode is how a test server serves plaintext connections.
type loopMode struct {
	loops int // Config.Loops: -1 a goroutine per connection
	wait  int // Config.loopWait
}

func (m loopMode) String() string {
	switch {
	case m.loops < 0:
		return "goroutines"
	case m.wait == loopWaitPoller:
		return fmt.Sprintf("loops=%d,poller", m.loops)
	default:
		return fmt.Sprintf("loops=%d,syscall", m.loops)
	}
}

func (m loopMode) apply(c *Config) { c.Loops, c.loopWait = m.loops, m.wait }

// loopModes: a goroutine per connection; one event loop and several,
// waiting in epoll_pwait or in Go's poller.
var (
	loopModes     = []loopMode{{loops: -1}, {1, loopWaitSyscall}, {1, loopWaitPoller}, {3, loopWaitSyscall}, {3, loopWaitPoller}}
	onlyLoopModes = loopModes[1:]
)

// TestLoopWaitFollowsThePs: loops wait in epoll_pwait while a P is left
// for the other goroutines, in the poller when every P has a loop.
func TestLoopWaitFollowsThePs(t *testing.T) {
	for _, c := range []struct {
		loops, procs, forced int
		want                 bool
	}{
		{1, 2, 0, false}, {1, 1, 0, true}, {2, 2, 0, true}, {3, 8, 0, false}, {8, 8, 0, true},
		{1, 1, loopWaitSyscall, false}, {1, 8, loopWaitPoller, true},
	} {
		if got := waitInPoller(c.loops, c.procs, c.forced); got != c.want {
			t.Errorf("%d loops, %d Ps, forced %d: in poller %v, want %v", c.loops, c.procs, c.forced, got, c.want)
		}
	}
}

// TestLoopModesServeAndEnd: in every mode, concurrent pipelining clients
// get their replies in order, a half-close after commands gets them and
// then the end, and every session ends.
func TestLoopModesServeAndEnd(t *testing.T) {
	for _, mode := range loopModes {
		t.Run(mode.String(), func(t *testing.T) {
			addr, srv, _ := startServer(t, command.Config{}, mode.apply)
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

// TestLoopBlockedClient: a blocking command on a loop's connection does
// not hold up the loop's other connections, and is served, then runs the
// commands pipelined after it.
func TestLoopBlockedClient(t *testing.T) {
	for _, mode := range loopModes {
		t.Run(mode.String(), func(t *testing.T) {
			addr, _, _ := startServer(t, command.Config{}, mode.apply)
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

// TestLoopParksBlockedClients: blocked clients wait on their loop, not in
// a goroutine each; pushes on any loop serve them in arrival order, each
// then runs what it pipelined meanwhile; the command's own timeout and
// CLIENT UNBLOCK wake them; the idle timeout does not close them (Redis);
// a client that goes away while blocked takes nothing with it.
func TestLoopParksBlockedClients(t *testing.T) {
	for _, mode := range onlyLoopModes {
		t.Run(mode.String(), func(t *testing.T) {
			addr, srv, _ := startServer(t, command.Config{}, func(c *Config) { mode.apply(c); c.IdleCheck = 20 * time.Millisecond })
			admin, ar := dial(t, addr)
			admin.Write([]byte("CONFIG SET timeout 1\r\n"))
			expect(t, ar, "+OK\r\n")

			const n = 40
			before := runtime.NumGoroutine()
			type client struct {
				c net.Conn
				r *bufio.Reader
			}
			var bs []client
			for i := range n {
				c, r := dial(t, addr)
				c.Write([]byte("BLPOP q 0\r\n"))
				bs = append(bs, client{c, r})
				// Arrival order: each is queued before the next is sent.
				eventually.True(t, 5*time.Second, fmt.Sprint(i+1, " blocked"), func() bool {
					return srv.cfg.Engine.BlockedClients() == int64(i+1)
				})
				c.Write([]byte("ECHO after\r\n")) // read while parked, run after the reply
			}
			if d := runtime.NumGoroutine() - before; d > n/4 {
				t.Fatalf("%d blocked clients added %d goroutines: not parked on their loops", n, d)
			}
			// Past the idle timeout (1 s), blocked clients are still there.
			eventually.Always(t, 1500*time.Millisecond, "blocked clients past the idle timeout", func() bool {
				return srv.cfg.Engine.BlockedClients() == n
			})
			admin, ar = dial(t, addr) // the first one was idle
			p, pr := dial(t, addr)
			for i := range n {
				v := fmt.Sprint("v", i)
				p.Write([]byte("RPUSH q " + v + "\r\n"))
				expect(t, pr, ":1\r\n")
				expect(t, bs[i].r, fmt.Sprintf("*2\r\n$1\r\nq\r\n$%d\r\n%s\r\n$5\r\nafter\r\n", len(v), v))
			}

			// The command's timeout, then CLIENT UNBLOCK, wake a parked client.
			c, r := dial(t, addr)
			c.Write([]byte("BLPOP q 0.05\r\nPING\r\n"))
			expect(t, r, "*-1\r\n+PONG\r\n")
			c.Write([]byte("CLIENT ID\r\n"))
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			c.Write([]byte("BLPOP q 0\r\n"))
			eventually.True(t, 5*time.Second, "blocked again", func() bool { return srv.cfg.Engine.BlockedClients() == 1 })
			admin.Write([]byte("CLIENT UNBLOCK " + strings.TrimSpace(line[1:]) + " ERROR\r\n"))
			expect(t, ar, ":1\r\n")
			expect(t, r, "-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n")

			// A client that closes while blocked: the next push stays in the list.
			gone, _ := dial(t, addr)
			gone.Write([]byte("BLPOP q 0\r\n"))
			eventually.True(t, 5*time.Second, "blocked", func() bool { return srv.cfg.Engine.BlockedClients() == 1 })
			gone.Close()
			eventually.True(t, 5*time.Second, "its wait abandoned", func() bool { return srv.cfg.Engine.BlockedClients() == 0 })
			p.Write([]byte("RPUSH q kept\r\nLRANGE q 0 -1\r\n"))
			expect(t, pr, ":1\r\n*1\r\n$4\r\nkept\r\n")
		})
	}
}

// TestLoopClientKillAndTimeout: CLIENT KILL and CONFIG SET timeout close
// a loop's connection.
func TestLoopClientKillAndTimeout(t *testing.T) {
	for _, mode := range loopModes {
		t.Run(mode.String(), func(t *testing.T) {
			addr, srv, _ := startServer(t, command.Config{}, func(c *Config) { mode.apply(c); c.IdleCheck = 50 * time.Millisecond })
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
	eventually.True(t, 5*time.Second, fmt.Sprintf("%d clients", n), func() bool { return srv.Clients() == n })
}

// A script that runs past its time limit holds its namespace's shards
// until SCRIPT KILL. With every plaintext connection on one loop, a
// command that waits for those shards must not freeze the loop: it runs
// on its connection's own goroutine, and PING, BUSY and SCRIPT KILL still
// get through on the others.
func TestLoopKeepsServingWhileAScriptHoldsTheKeys(t *testing.T) {
	for _, mode := range loopModes[:3] {
		t.Run(mode.String(), func(t *testing.T) {
			// The limit leaves the getter below time to arrive and wait for
			// the shards: after it, Redis's answer would be -BUSY (seen at
			// GOMAXPROCS=1 under -race with a 50 ms limit).
			addr, srv, _ := startServer(t, command.Config{ScriptTimeLimit: 500 * time.Millisecond}, mode.apply)
			runner, rr := dial(t, addr)
			if _, err := runner.Write([]byte("EVAL \"local i = 0 while true do i = i + 1 end\" 0\r\n")); err != nil {
				t.Fatal(err)
			}
			eventually.True(t, 10*time.Second, "the script running", srv.cfg.Engine.ScriptsRunning)
			// Waits for the shards the script holds.
			getter, gr := dial(t, addr)
			if _, err := getter.Write([]byte("GET k\r\n")); err != nil {
				t.Fatal(err)
			}
			other, or := dial(t, addr)
			eventually.True(t, 10*time.Second, "BUSY for other clients", func() bool {
				if _, err := other.Write([]byte("PING\r\n")); err != nil {
					t.Fatal(err)
				}
				line, err := or.ReadString('\n')
				if err != nil {
					t.Fatalf("PING while a script runs: %v", err)
				}
				return strings.HasPrefix(line, "-BUSY ")
			})
			killer, kr := dial(t, addr)
			if _, err := killer.Write([]byte("SCRIPT KILL\r\n")); err != nil {
				t.Fatal(err)
			}
			expect(t, kr, "+OK\r\n")
			if line, err := rr.ReadString('\n'); err != nil || !strings.HasPrefix(line, "-ERR Script killed") {
				t.Fatalf("the killed script answered %q, %v", line, err)
			}
			expect(t, gr, "$-1\r\n")
		})
	}
}

// Serve deals a new connection past a loop stuck in one command (or one
// that has ended), so that a client can always reach the node.
func TestPickLoopSkipsStuckLoops(t *testing.T) {
	a, b := &loop{}, &loop{}
	loops, next := []*loop{a, b}, 0
	if l := pickLoop(loops, &next); l != a {
		t.Fatalf("first pick %p, want a", l)
	}
	if l := pickLoop(loops, &next); l != b {
		t.Fatalf("second pick %p, want b (round robin)", l)
	}
	a.busySince.Store(time.Now().Add(-2 * stuckAfter).UnixNano())
	for range 3 {
		if l := pickLoop(loops, &next); l != b {
			t.Fatalf("pick %p while a is stuck, want b", l)
		}
	}
	b.dead.Store(true)
	if l := pickLoop(loops, &next); l != nil {
		t.Fatalf("pick %p with every loop stuck or dead, want none (a goroutine)", l)
	}
	a.busySince.Store(time.Now().UnixNano()) // busy, not yet stuck
	if l := pickLoop(loops, &next); l != a {
		t.Fatalf("pick %p, want a again once it is not stuck", l)
	}
}
