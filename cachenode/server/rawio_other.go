//go:build !linux

package server

import "net"

// serveRaw reports false: raw nonblocking system calls are Linux-only, so
// connections are served through net.Conn.
func (s *Server) serveRaw(nc net.Conn, c *conn) bool { return false }
