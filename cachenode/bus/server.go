// Package bus is the node-to-node port of a cache node (Redis Cluster's
// "cluster bus" port, by default the RESP port + 10000): replication
// streams and slot-migration imports use it, clients do not. It speaks
// RESP so it can be poked with redis-cli, and is plain
// goroutine-per-connection code: there are few peers and they are long
// lived.
//
// In a platform deployment the listener is mutual TLS admitting cachenode
// identities only (the caller wraps it), so neither the dataset a SYNC
// streams nor a secret crosses the wire in clear. With Server.Secret set,
// a connection's first command must also be AUTH <secret>; everything
// before that gets -NOAUTH.
package bus

import (
	"context"
	"crypto/subtle"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/portico-io/portico/cachenode/resp"
)

// Defaults.
const (
	// DefaultPortOffset is added to the RESP port for the bus port.
	DefaultPortOffset = 10000
	// DefaultIdleTimeout is how long a connection may wait between commands.
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultIOTimeout bounds one write (a reply flush) and a Client's
	// request/reply round trip without a context deadline.
	DefaultIOTimeout = 10 * time.Second
)

// Handler serves one command; args[0] is the command name. It replies
// through c.W and c.Flush, or keeps the connection for a stream by not
// returning until the stream ends. args alias the read buffer and are
// valid until the handler returns or calls c.ReadCommand. A handler that
// reads (ReadCommand) from another goroutine must close the connection and
// wait for that goroutine before it returns.
type Handler func(c *Conn, args [][]byte)

// Server serves the bus port. Set the fields before Serve; Handle may be
// called before Serve only.
type Server struct {
	// Secret, when set, must be presented with AUTH first.
	Secret string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// IdleTimeout and IOTimeout default to DefaultIdleTimeout and
	// DefaultIOTimeout.
	IdleTimeout, IOTimeout time.Duration

	handlers map[string]Handler
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
}

// Handle registers h for the command name (case-insensitive).
func (s *Server) Handle(name string, h Handler) {
	if s.handlers == nil {
		s.handlers = map[string]Handler{}
	}
	s.handlers[strings.ToLower(name)] = h
}

// Serve accepts connections on lis until ctx ends, then closes lis and
// every connection and waits for their handlers to return. It returns nil
// after ctx ends, or the accept error that stopped it.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.IdleTimeout <= 0 {
		s.IdleTimeout = DefaultIdleTimeout
	}
	if s.IOTimeout <= 0 {
		s.IOTimeout = DefaultIOTimeout
	}
	s.mu.Lock()
	s.conns = map[net.Conn]struct{}{}
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() {
		lis.Close()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
	})
	defer stop()
	var err error
	for {
		nc, aerr := lis.Accept()
		if aerr != nil {
			if ctx.Err() == nil {
				err = aerr
				cancel()
			}
			break
		}
		s.mu.Lock()
		if ctx.Err() != nil {
			s.mu.Unlock()
			nc.Close()
			break
		}
		s.conns[nc] = struct{}{}
		s.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveConn(ctx, nc)
			s.mu.Lock()
			delete(s.conns, nc)
			s.mu.Unlock()
			nc.Close()
		}()
	}
	wg.Wait()
	return err
}

// Conn is one bus connection as a handler sees it. Not safe for
// concurrent use, except that Close may be called from any goroutine and
// one goroutine may ReadCommand while another writes (a stream that reads
// the peer's acks).
type Conn struct {
	// W collects replies; Flush sends them.
	W   resp.Writer
	nc  net.Conn
	rd  *resp.Reader
	ctx context.Context
	s   *Server
}

// Context ends when the server stops.
func (c *Conn) Context() context.Context { return c.ctx }

// RemoteAddr is the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// Logger is the server's logger.
func (c *Conn) Logger() *slog.Logger { return c.s.Logger }

// Flush writes the buffered replies within the server's IOTimeout.
func (c *Conn) Flush() error {
	if len(c.W.Buf) == 0 {
		return nil
	}
	_, err := c.Write(c.W.Buf)
	c.W.Reset()
	return err
}

// Write writes p within the server's IOTimeout (for streams that frame
// their own data after a handshake reply).
func (c *Conn) Write(p []byte) (int, error) {
	if err := c.nc.SetWriteDeadline(time.Now().Add(c.s.IOTimeout)); err != nil {
		return 0, err
	}
	return c.nc.Write(p)
}

// ReadCommand reads the next command from the peer, waiting at most
// timeout. The arguments are valid until the next ReadCommand.
func (c *Conn) ReadCommand(timeout time.Duration) ([][]byte, error) {
	for {
		args, err := c.rd.Next()
		if err != nil || args != nil {
			return args, err
		}
		if err := c.nc.SetReadDeadline(time.Now().Add(timeout)); err != nil {
			return nil, err
		}
		if err := c.rd.Fill(); err != nil {
			return nil, err
		}
	}
}

// Close closes the connection; from another goroutine it unblocks the
// handler's reads and writes.
func (c *Conn) Close() error {
	return c.nc.Close()
}

func (s *Server) serveConn(ctx context.Context, nc net.Conn) {
	c := &Conn{nc: nc, rd: resp.NewReader(nc, resp.Limits{}), ctx: ctx, s: s, W: resp.Writer{Proto: 2}}
	authed := s.Secret == ""
	for {
		c.rd.Unauthenticated = !authed
		args, err := c.ReadCommand(s.IdleTimeout)
		if err != nil {
			var pe *resp.ProtocolError
			if errors.As(err, &pe) {
				c.W.Error("ERR Protocol error: " + pe.Msg)
				_ = c.Flush()
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && ctx.Err() == nil {
				s.Logger.Debug("bus: connection ended", "peer", nc.RemoteAddr().String(), "err", err)
			}
			return
		}
		name := strings.ToLower(string(args[0]))
		switch {
		case name == "auth":
			if len(args) != 2 {
				c.W.Error("ERR wrong number of arguments for 'auth' command")
			} else if s.Secret == "" {
				c.W.Error("ERR AUTH called without a secret configured")
			} else if subtle.ConstantTimeCompare(args[1], []byte(s.Secret)) == 1 {
				authed = true
				c.W.OK()
			} else {
				s.Logger.Warn("bus: wrong secret", "peer", nc.RemoteAddr().String())
				c.W.Error("WRONGPASS invalid bus secret")
			}
		case !authed:
			c.W.Error("NOAUTH Authentication required.")
		case name == "ping":
			c.W.Simple("PONG")
		default:
			h := s.handlers[name]
			if h == nil {
				c.W.Error("ERR unknown command '" + truncate(name, 64) + "'")
				break
			}
			h(c, args)
		}
		if err := c.Flush(); err != nil {
			return
		}
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
