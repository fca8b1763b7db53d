//go:build !linux

package server

import (
	"io"
	"net"
)

// newConnIO returns nc: raw nonblocking system calls are Linux-only.
func newConnIO(nc net.Conn) io.ReadWriter { return nc }
