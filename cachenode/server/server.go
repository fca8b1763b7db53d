// Package server accepts RESP connections and runs each command through a
// command.Engine: one goroutine per connection reads with a resp.Reader
// (RESP2 multibulk and inline commands, Redis's protocol errors and
// limits), executes every command already buffered, and writes their
// replies with one write when the client has sent nothing more, as Redis
// does for a pipeline.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
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

// Config configures a Server.
type Config struct {
	Engine *command.Engine
	// MaxClients caps concurrent connections (default DefaultMaxClients).
	MaxClients int
	// Limits bound the protocol input (zero fields: Redis's defaults).
	Limits resp.Limits
	Logger *slog.Logger
}

// Server serves RESP. Create with New, run with Serve.
type Server struct {
	cfg     Config
	clients atomic.Int64
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
	return &Server{cfg: cfg}, nil
}

// Clients is the number of connected clients.
func (s *Server) Clients() int { return int(s.clients.Load()) }

// Serve serves lis until ctx is done; then it closes the listener and every
// connection and returns once their goroutines have ended.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	var (
		mu     sync.Mutex
		conns  = map[net.Conn]struct{}{}
		closed bool
		wg     sync.WaitGroup
	)
	defer wg.Wait()
	closeAll := func() {
		_ = lis.Close()
		mu.Lock()
		defer mu.Unlock()
		closed = true
		for c := range conns {
			_ = c.Close()
		}
	}
	stop := context.AfterFunc(ctx, closeAll)
	defer stop()
	var backoff time.Duration
	for {
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
			// A new socket's send buffer is empty: this write does not
			// block, the deadline only bounds a pathological peer.
			_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = nc.Write([]byte("-ERR max number of clients reached\r\n"))
			_ = nc.Close()
			continue
		}
		mu.Lock()
		if closed {
			mu.Unlock()
			s.clients.Add(-1)
			_ = nc.Close()
			return nil
		}
		conns[nc] = struct{}{}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveConn(nc)
			mu.Lock()
			delete(conns, nc)
			mu.Unlock()
		}()
	}
}

func retryable(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// serveConn runs one connection until the client closes it, QUIT, a
// protocol error or a failed write.
func (s *Server) serveConn(nc net.Conn) {
	eng := s.cfg.Engine
	sess := eng.NewSession(nc.RemoteAddr().String())
	defer func() {
		_ = nc.Close()
		eng.Close(sess)
		s.clients.Add(-1)
	}()
	rw := newConnIO(nc)
	rd := resp.NewReader(rw, s.cfg.Limits)
	var w resp.Writer
	flush := func() bool {
		if len(w.Buf) == 0 {
			return true
		}
		_, err := rw.Write(w.Buf)
		w.Reset()
		if cap(w.Buf) > maxIdleReplyBuf {
			w.Buf = nil
		}
		return err == nil
	}
	nowMs, sinceClock := time.Now().UnixMilli(), 0
	for {
		rd.Unauthenticated = eng.NeedsAuth(sess)
		args, err := rd.Next()
		if err != nil {
			// Redis replies to the commands before a protocol error, then
			// with the error, and closes.
			var pe *resp.ProtocolError
			if errors.As(err, &pe) {
				w.Error("ERR Protocol error: " + pe.Msg)
			}
			flush()
			return
		}
		if args == nil {
			// Every buffered command has run: the client is waiting for
			// these replies before it sends more.
			if !flush() {
				return
			}
			if err := rd.Fill(); err != nil {
				if errors.Is(err, resp.ErrQueryBufferLimit) {
					s.cfg.Logger.Warn("server: closing client over the query buffer limit", "addr", sess.Addr)
				}
				return
			}
			nowMs, sinceClock = time.Now().UnixMilli(), 0
			continue
		}
		if sinceClock == clockEvery {
			nowMs, sinceClock = time.Now().UnixMilli(), 0
		}
		sinceClock++
		eng.ExecAt(sess, args, &w, nowMs)
		if sess.Quit {
			flush()
			return
		}
		if len(w.Buf) >= flushThreshold && !flush() {
			return
		}
	}
}
