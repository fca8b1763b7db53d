// Package server accepts RESP connections and runs each command through a
// command.Engine: a connection reads with a resp.Reader (RESP2 multibulk
// and inline commands, Redis's protocol errors and limits), executes
// every command already buffered, and writes their replies with one write
// when the client has sent nothing more, as Redis does for a pipeline.
// Plaintext connections are served by event loops on Linux (loop_linux.go),
// others by a goroutine each.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/portico-io/portico/cachenode/command"
	"github.com/portico-io/portico/cachenode/resp"
)

// DefaultMaxClients caps concurrent connections: past it a node refuses
// rather than queueing, as a cache whose reply is late is already useless.
const DefaultMaxClients = 10000

// flushThreshold: replies accumulated past it are written before the rest
// of a long pipeline runs, so one connection's pending replies stay small.
const flushThreshold = 64 << 10

// clockEvery: the clock is read when input arrives and again every so many
// commands of a long pipeline, so TTLs stay within a fraction of a
// millisecond of the wall clock.
const clockEvery = 16

// maxIdleReplyBuf: a reply buffer grown past it (a large MGET) is dropped
// after the write rather than pinned by an idle connection.
const maxIdleReplyBuf = 1 << 20

// DefaultIdleCheck is Config.IdleCheck's default.
const DefaultIdleCheck = 2 * time.Second

// Config configures a Server.
type Config struct {
	Engine *command.Engine
	// MaxClients caps concurrent connections (default DefaultMaxClients).
	MaxClients int
	// Limits bound the protocol input (zero fields: Redis's defaults).
	Limits resp.Limits
	Logger *slog.Logger
	// IdleCheck is how often a connection looks at its socket when it has
	// not heard from the client: to see an end that arrived with the last
	// commands (a half-close), and to give back the buffers of a client
	// that sent nothing for a whole period (default 2 s).
	IdleCheck time.Duration
	// Loops is the number of event loops serving plaintext TCP
	// connections (Linux; see loop_linux.go): 0 = DefaultLoops();
	// negative = none, a goroutine per connection.
	Loops int
	// loopWait forces how idle loops wait (tests): 0 decides by the Ps
	// (loop_linux.go), loopWaitPoller or loopWaitSyscall.
	loopWait int
}

// Server serves RESP. Create with New, run with Serve.
type Server struct {
	cfg     Config
	clients atomic.Int64
	closing atomic.Bool // Serve is closing every connection
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Engine == nil {
		return nil, errors.New("server: Config.Engine is required")
	}
	if cfg.MaxClients <= 0 {
		cfg.MaxClients = DefaultMaxClients
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.IdleCheck <= 0 {
		cfg.IdleCheck = DefaultIdleCheck
	}
	if cfg.Loops == 0 {
		cfg.Loops = DefaultLoops()
	}
	return &Server{cfg: cfg}, nil
}

// Config.loopWait's forced modes.
const (
	loopWaitPoller = 1 + iota
	loopWaitSyscall
)

// DefaultLoops is Config.Loops's default: one event loop per two Ps
// (GOMAXPROCS, which Go sizes from the CPUs the process may use: its
// affinity mask and cgroup CPU quota), at least one. A loop that parks
// leaves its P idle, and every loop the poller readies while another runs
// wakes an idle P's thread: on 2 vCPUs under redis-benchmark -c 50 -P 1
// SET, two loops made 6 400-6 900 futex calls per 200k requests and one
// 380-480 (GOMAXPROCS=1: 130-180), with as many context switches per
// request as GOMAXPROCS=1 (two loops: 10 % more). The other Ps run what is
// not a loop: the garbage collector, TLS connections, connections that
// wait (slow readers, scripts), replication and expiry. More
// than 2 Ps was not measured; Config.Loops overrides.
func DefaultLoops() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// Clients is the number of connected clients.
func (s *Server) Clients() int { return int(s.clients.Load()) }

// Serve serves lis until ctx is done; then it closes the listener and every
// connection and returns once their goroutines have ended.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	tr := &tracker{conns: map[io.Closer]struct{}{}}
	defer tr.wg.Wait()
	loops := s.startLoops(tr)
	closeAll := func() {
		s.closing.Store(true)
		_ = lis.Close()
		tr.closeAll()
		for _, l := range loops {
			l.stop()
		}
	}
	stop := context.AfterFunc(ctx, closeAll)
	defer stop()
	var backoff time.Duration
	for next := 0; ; {
		nc, err := lis.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if retryable(err) {
				// Out of file descriptors or memory: wait for connections
				// to close, as net/http does, instead of spinning.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.cfg.Logger.Warn("server: accept", "err", err, "retryIn", backoff)
				time.Sleep(backoff)
				continue
			}
			stop()
			closeAll()
			return fmt.Errorf("server: accept: %w", err)
		}
		backoff = 0
		if s.clients.Add(1) > int64(s.cfg.MaxClients) {
			s.clients.Add(-1)
			// Off the accept loop: over TLS the write first runs the
			// handshake, which waits for the client. The deadline bounds
			// both directions.
			go func() {
				_ = nc.SetDeadline(time.Now().Add(time.Second))
				_, _ = nc.Write([]byte("-ERR max number of clients reached\r\n"))
				_ = nc.Close()
			}()
			continue
		}
		if l := pickLoop(loops, &next); l != nil && s.serveInLoop(l, nc, tr) {
			continue
		}
		if !tr.add(nc) {
			s.clients.Add(-1)
			_ = nc.Close()
			return nil
		}
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			s.serveConn(nc)
			tr.remove(nc)
		}()
	}
}

// tracker is one Serve call's connections and goroutines: Serve closes
// the connections when it ends and waits for the goroutines.
type tracker struct {
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[io.Closer]struct{}
	closed bool
}

// add tracks c; false when Serve is closing (the caller closes c).
func (t *tracker) add(c io.Closer) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.conns[c] = struct{}{}
	return true
}

func (t *tracker) remove(c io.Closer) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
}

func (t *tracker) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for c := range t.conns {
		_ = c.Close()
	}
}

// endConn ends c's session once its socket is closed.
func (s *Server) endConn(c *conn) {
	s.cfg.Engine.Close(c.sess)
	s.clients.Add(-1)
}

func retryable(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// serveConn runs one connection until the client closes it, QUIT, a
// protocol error or a failed write.
func (s *Server) serveConn(nc net.Conn) {
	eng := s.cfg.Engine
	c := &conn{s: s, eng: eng, sess: eng.NewSession(nc.RemoteAddr().String())}
	// A blocking command (BLPOP) waits in this goroutine, in a read that
	// also notices the client closing; its completion interrupts the read.
	c.sess.CanBlock = true
	c.sess.Wake = func() { _ = nc.SetReadDeadline(aLongTimeAgo) }
	c.sess.LAddr = nc.LocalAddr().String()
	// CLIENT KILL from another connection shuts the socket down: this
	// goroutine's read or write fails and the connection ends as if the
	// client had left (shutdown says why not Close).
	eng.Attach(c.sess, func() { _ = shutdown(nc) })
	defer func() {
		_ = nc.Close()
		s.endConn(c)
	}()
	if s.serveRaw(nc, c) {
		return
	}
	c.rd = resp.NewReader(nc, s.cfg.Limits)
	c.out = nc
	c.nc = nc
	for c.run() {
		if c.sess.Blocked() {
			if !c.waitBlocked(nc) {
				return
			}
			continue // its reply, then the commands sent after it
		}
		if !c.fill() {
			return
		}
	}
}

// aLongTimeAgo is a read deadline in the past: it interrupts a read at
// once (how a blocked connection is woken).
var aLongTimeAgo = time.Unix(1, 0)

// waitBlocked waits until the blocking command of c completes, reading
// what the client sends meanwhile into the buffer (it runs afterwards, as
// Redis runs a blocked client's pipeline), and writes the command's reply
// into c's buffer. false: the connection must close (the client did, or
// -UNBLOCKED).
func (c *conn) waitBlocked(nc net.Conn) bool {
	for c.eng.ArmWait(c.sess, func() { _ = nc.SetReadDeadline(time.Time{}) }) {
		if err := c.rd.Fill(); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			c.fillFailed(err)
			return false
		}
	}
	_ = nc.SetReadDeadline(time.Time{})
	return c.unblocked()
}

// unblocked takes the reply of the completed blocking command; false
// when the connection closes after it (-UNBLOCKED on a role change).
func (c *conn) unblocked() bool {
	c.eng.Unblock(c.sess, &c.w)
	c.nowMs, c.sinceClock = time.Now().UnixMilli(), 0
	if c.sess.Quit {
		c.flush()
		return false
	}
	return true
}

// conn is one connection's command loop, apart from how it waits for input.
type conn struct {
	s    *Server
	eng  *command.Engine
	sess *command.Session
	rd   *resp.Reader
	w    resp.Writer
	out  io.Writer // replies
	nc   net.Conn  // set on the net.Conn path (TLS), which needs a deadline for CONFIG SET timeout

	idleDeadline bool // nc has a read deadline for the idle timeout

	nowMs      int64
	sinceClock int
	ran        int // commands whose replies are not written yet

	// stalled, set on a connection an event loop serves, reports replies
	// the socket had no room for: run stops, and the connection moves to
	// a goroutine of its own that waits to write them (loop_linux.go).
	stalled func() bool
	// held is a command run stopped before (runsLong) for the
	// connection's own goroutine to run first; it aliases the Reader's
	// buffer, which no Fill or Next touches until then.
	held [][]byte
}

// runsLong reports the commands an event loop leaves to the connection's
// own goroutine: scripts, which may run past their time limit while other
// clients get BUSY and send SCRIPT KILL, and EXEC, whose transaction may
// queue one. Other slow commands (KEYS over a large keyspace) hold up
// their loop's other connections, as they hold up redis-server.
func runsLong(name []byte) bool {
	switch len(name) {
	case 4, 7, 8, 10:
	default:
		return false
	}
	for _, n := range [...]string{"eval", "exec", "evalsha", "eval_ro", "evalsha_ro"} {
		if len(n) == len(name) && asciiEqualFold(n, name) {
			return true
		}
	}
	return false
}

// asciiEqualFold: lower == name, ASCII case-insensitively.
func asciiEqualFold(lower string, name []byte) bool {
	for i := range len(name) {
		if name[i]|0x20 != lower[i] {
			return false
		}
	}
	return true
}

// fill reads once into the Reader and reads the clock; false: close (the
// client went away, a read failed, or the query buffer limit).
func (c *conn) fill() bool {
	if t := c.eng.IdleTimeout(); t > 0 || c.idleDeadline {
		var d time.Time
		if c.idleDeadline = t > 0; t > 0 {
			d = time.Now().Add(t)
		}
		_ = c.nc.SetReadDeadline(d) // the read fails past it: the connection closes
	}
	if err := c.rd.Fill(); err != nil {
		c.fillFailed(err)
		return false
	}
	c.nowMs, c.sinceClock = time.Now().UnixMilli(), 0
	return true
}

func (c *conn) fillFailed(err error) {
	if errors.Is(err, resp.ErrQueryBufferLimit) {
		c.s.cfg.Logger.Warn("server: closing client over the query buffer limit", "addr", c.sess.Addr)
	}
}

// idle gives back the buffers of a connection that has been idle for a
// while: the input buffer when it holds no partial command, and the reply
// buffer (empty between batches).
func (c *conn) idle() {
	if c.rd.Release() && len(c.w.Buf) == 0 {
		c.w.Buf = nil
	}
}

// flush writes the pending replies; false when the write failed.
func (c *conn) flush() bool {
	c.ran = 0
	if len(c.w.Buf) == 0 {
		return true
	}
	_, err := c.out.Write(c.w.Buf)
	c.w.Reset()
	if cap(c.w.Buf) > maxIdleReplyBuf {
		c.w.Buf = nil
	}
	return err == nil
}

// run executes every complete command in the Reader's buffer and writes
// their replies, once the buffer holds no complete command (the client
// waits for them before it sends more) or whenever they pass
// flushThreshold. It returns false when the connection must close: QUIT,
// a protocol error (Redis replies to the commands before it, then with
// the error), or a failed write.
func (c *conn) run() bool {
	for {
		args, err := c.held, error(nil)
		if args != nil {
			c.held = nil
		} else {
			c.rd.Unauthenticated = c.eng.NeedsAuth(c.sess)
			args, err = c.rd.Next()
		}
		if err != nil {
			var pe *resp.ProtocolError
			if errors.As(err, &pe) {
				c.w.Error("ERR Protocol error: " + pe.Msg)
			}
			c.flush()
			return false
		}
		if args == nil {
			if c.ran > 1 && c.stalled == nil {
				// A pipelined batch: let the other connections whose input
				// is ready run before these replies go out, as Redis writes
				// every client's replies after its whole event-loop pass.
				// The replies then leave in a burst and pipelining clients
				// keep in step: redis-benchmark -P 16, p99 2.0-2.6 ms
				// instead of 2.8-2.9 (redis-server 2.0-2.2), same CPU. A
				// single command (-P 1) is answered at once. An event
				// loop already serves the other ready connections next.
				runtime.Gosched()
			}
			return c.flush()
		}
		if c.stalled != nil && (runsLong(args[0]) || c.eng.ScriptsRunning()) {
			// Hold it for the connection's own goroutine: a script may run
			// past its time limit, and the loop must keep serving the
			// other connections (BUSY, SCRIPT KILL); while one runs, any
			// command may wait for the shards it holds. A script that
			// starts after this check can still catch the loop in a
			// command: Serve then deals new connections past the loop
			// (loop.stuck), so SCRIPT KILL gets through.
			c.held = args
			return c.flush()
		}
		c.ran++
		if c.sinceClock == clockEvery {
			c.nowMs, c.sinceClock = time.Now().UnixMilli(), 0
		}
		c.sinceClock++
		c.eng.ExecAt(c.sess, args, &c.w, c.nowMs)
		if c.sess.Blocked() {
			// The replies before it go out; the caller waits for it
			// before running the rest of the pipeline.
			return c.flush()
		}
		if c.sess.Quit {
			c.flush()
			return false
		}
		if len(c.w.Buf) >= flushThreshold {
			if !c.flush() {
				return false
			}
			if c.stalled != nil && c.stalled() {
				return true // the rest runs once the replies are out
			}
		}
	}
}
