// Package server accepts RESP connections (via tidwall/redcon, which parses
// RESP2 multibulk and inline commands and batches pipelined commands) and
// runs each command through a command.Engine. Replies to one pipeline batch
// are flushed together.
package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"

	"github.com/tidwall/redcon"

	"github.com/portico-io/portico/cachenode/command"
	"github.com/portico-io/portico/cachenode/resp"
)

// DefaultMaxClients caps concurrent connections: past it a node refuses
// rather than queueing, as a cache whose reply is late is already useless.
const DefaultMaxClients = 10000

// Config configures a Server.
type Config struct {
	Engine *command.Engine
	// MaxClients caps concurrent connections (default DefaultMaxClients).
	MaxClients int
	Logger     *slog.Logger
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

type connState struct {
	sess *command.Session
	w    resp.Writer
}

// Serve serves lis until ctx is done; then it closes the listener and every
// connection.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	eng := s.cfg.Engine
	rs := redcon.NewServerNetwork(lis.Addr().Network(), lis.Addr().String(),
		func(conn redcon.Conn, cmd redcon.Command) {
			st := conn.Context().(*connState)
			st.w.Reset()
			eng.Exec(st.sess, cmd.Args, &st.w)
			conn.WriteRaw(st.w.Buf)
			if cap(st.w.Buf) > 1<<20 {
				st.w.Buf = nil // do not pin a large reply buffer per idle connection
			}
			if st.sess.Quit {
				_ = conn.Close()
			}
		},
		func(conn redcon.Conn) bool {
			if s.clients.Add(1) > int64(s.cfg.MaxClients) {
				s.clients.Add(-1)
				conn.WriteError("ERR max number of clients reached")
				return false
			}
			conn.SetContext(&connState{sess: eng.NewSession(conn.RemoteAddr())})
			return true
		},
		func(conn redcon.Conn, err error) {
			if st, ok := conn.Context().(*connState); ok {
				eng.Close(st.sess)
				s.clients.Add(-1)
			}
		})
	errc := make(chan error, 1)
	go func() { errc <- rs.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		_ = rs.Close()
		<-errc
		return nil
	}
}
