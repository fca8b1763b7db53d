package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/portico-io/portico/cachenode/command"
	"github.com/portico-io/portico/cachenode/resp"
)

// loopConn is one connection served by an event loop.
type loopConn struct {
	sess   *command.Session
	rd     *resp.Reader
	opened atomic.Bool // OnOpen ran: OnClose will release the connection
}

// loopHandler runs the commands of event-loop connections (gnet).
type loopHandler struct {
	gnet.BuiltinEventEngine
	s *Server
	// replyBufs: a connection borrows a reply buffer for one batch only
	// (gnet copies what the socket does not take at once into the
	// connection's outbound buffer), so idle connections hold none.
	replyBufs sync.Pool
}

// serveEventLoop accepts on lis as serveGoroutines does (same max-clients
// reply and accept back-off) and hands each connection to gnet event loops
// (one per GOMAXPROCS): each loop waits in epoll_wait for all its sockets,
// reads once per readable socket into its own buffer, parses the commands
// there and writes the batch's replies with one write.
func (s *Server) serveEventLoop(ctx context.Context, lis net.Listener) error {
	h := &loopHandler{s: s}
	h.replyBufs.New = func() any { return new([]byte) }
	loops := runtime.GOMAXPROCS(0)
	cli, err := gnet.NewClient(h,
		gnet.WithMulticore(loops > 1),
		gnet.WithNumEventLoop(loops),
		gnet.WithLogger(gnetLogger{s.cfg.Logger}))
	if err != nil {
		_ = lis.Close()
		return fmt.Errorf("server: event loop: %w", err)
	}
	if err := cli.Start(); err != nil {
		_ = lis.Close()
		return fmt.Errorf("server: event loop: %w", err)
	}
	// Stopping the loops closes every connection still open (OnClose).
	defer func() { _ = cli.Stop() }()
	stop := context.AfterFunc(ctx, func() { _ = lis.Close() })
	defer stop()
	var backoff time.Duration
	for {
		nc, err := lis.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if retryable(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.cfg.Logger.Warn("server: accept", "err", err, "retryIn", backoff)
				time.Sleep(backoff)
				continue
			}
			_ = lis.Close()
			return fmt.Errorf("server: accept: %w", err)
		}
		backoff = 0
		if !s.admit(nc) {
			continue
		}
		lc := &loopConn{}
		// EnrollContext moves the socket (a dup of its descriptor) to the
		// least loaded loop, runs OnOpen there and closes nc.
		if _, err := cli.EnrollContext(nc, lc); err != nil || !lc.opened.Load() {
			if !lc.opened.Load() {
				s.clients.Add(-1)
			}
			if err != nil {
				s.cfg.Logger.Warn("server: event loop: adding a connection", "err", err)
			}
		}
	}
}

// admit counts a new connection, or refuses it past MaxClients with
// Redis's error and closes it.
func (s *Server) admit(nc net.Conn) bool {
	if s.clients.Add(1) <= int64(s.cfg.MaxClients) {
		return true
	}
	s.clients.Add(-1)
	// A new socket's send buffer is empty: this write does not block, the
	// deadline only bounds a pathological peer.
	_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = nc.Write([]byte("-ERR max number of clients reached\r\n"))
	_ = nc.Close()
	return false
}

func (h *loopHandler) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	lc := c.Context().(*loopConn)
	lc.sess = h.s.cfg.Engine.NewSession(c.RemoteAddr().String())
	lc.rd = resp.NewFeedReader(h.s.cfg.Limits)
	lc.opened.Store(true)
	return nil, gnet.None
}

func (h *loopHandler) OnClose(c gnet.Conn, _ error) gnet.Action {
	lc := c.Context().(*loopConn)
	h.s.cfg.Engine.Close(lc.sess)
	h.s.clients.Add(-1)
	return gnet.None
}

// OnTraffic runs every complete command the connection has sent, in the
// bytes gnet read (no copy unless a frame spans reads), and writes their
// replies with one write; past flushThreshold it writes before going on.
func (h *loopHandler) OnTraffic(c gnet.Conn) gnet.Action {
	lc := c.Context().(*loopConn)
	in, _ := c.Next(-1) // the loop's read buffer: everything is consumed
	if err := lc.rd.Feed(in); err != nil {
		h.s.cfg.Logger.Warn("server: closing client over the query buffer limit", "addr", lc.sess.Addr)
		return gnet.Close
	}
	bp := h.replyBufs.Get().(*[]byte)
	w := resp.Writer{Buf: (*bp)[:0]}
	action := h.run(c, lc, &w)
	lc.rd.Keep()
	if cap(w.Buf) <= maxIdleReplyBuf {
		*bp = w.Buf[:0]
		h.replyBufs.Put(bp)
	}
	return action
}

func (h *loopHandler) run(c gnet.Conn, lc *loopConn, w *resp.Writer) gnet.Action {
	eng, sess, rd := h.s.cfg.Engine, lc.sess, lc.rd
	flush := func() bool {
		if len(w.Buf) == 0 {
			return true
		}
		_, err := c.Write(w.Buf) // what the socket does not take is copied
		w.Reset()
		return err == nil
	}
	nowMs, sinceClock := time.Now().UnixMilli(), 0
	for {
		rd.Unauthenticated = eng.NeedsAuth(sess)
		args, err := rd.Next()
		if err != nil {
			var pe *resp.ProtocolError
			if errors.As(err, &pe) {
				w.Error("ERR Protocol error: " + pe.Msg)
			}
			flush()
			return gnet.Close // gnet writes what is still buffered first
		}
		if args == nil {
			if !flush() {
				return gnet.Close
			}
			return gnet.None
		}
		if sinceClock == clockEvery {
			nowMs, sinceClock = time.Now().UnixMilli(), 0
		}
		sinceClock++
		eng.ExecAt(sess, args, w, nowMs)
		if sess.Quit {
			flush()
			return gnet.Close
		}
		if len(w.Buf) >= flushThreshold && !flush() {
			return gnet.Close
		}
	}
}

// gnetLogger sends gnet's log lines to the server's logger (its
// informational ones at debug level).
type gnetLogger struct{ l *slog.Logger }

func (g gnetLogger) Debugf(f string, a ...any) { g.l.Debug("gnet: " + fmt.Sprintf(f, a...)) }
func (g gnetLogger) Infof(f string, a ...any)  { g.l.Debug("gnet: " + fmt.Sprintf(f, a...)) }
func (g gnetLogger) Warnf(f string, a ...any)  { g.l.Warn("gnet: " + fmt.Sprintf(f, a...)) }
func (g gnetLogger) Errorf(f string, a ...any) { g.l.Error("gnet: " + fmt.Sprintf(f, a...)) }
func (g gnetLogger) Fatalf(f string, a ...any) { g.l.Error("gnet: " + fmt.Sprintf(f, a...)) }
