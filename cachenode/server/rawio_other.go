//go:build !linux

package server

import "net"

// serveRaw reports false: raw nonblocking system calls are Linux-only, so
// connections are served through net.Conn.
func (s *Server) serveRaw(nc net.Conn, c *conn) bool { return false }

// loop: event loops are Linux-only (epoll); elsewhere every connection
// has a goroutine of its own.
type loop struct{}

func (l *loop) stop() {}

func (s *Server) startLoops(tr *tracker) []*loop { return nil }

func (s *Server) serveInLoop(l *loop, nc net.Conn, tr *tracker) bool { return false }

func pickLoop(loops []*loop, next *int) *loop { return nil }

// shutdown ends nc's connection from another goroutine (CLIENT KILL).
func shutdown(nc net.Conn) error { return nc.Close() }
