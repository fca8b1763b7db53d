//go:build linux

package server

import (
	"io"
	"net"
	"syscall"
	"unsafe"
)

// rawIO reads and writes a nonblocking socket with raw system calls and
// waits in Go's network poller (syscall.RawConn) only when the socket
// would block.
//
// Why: a write to a loopback or LAN peer routinely takes over 20 µs (the
// kernel runs the peer's receive path in it), and a P in a syscall that
// long is retaken by sysmon and handed to another thread. At GOMAXPROCS=1
// that was a futex wake and two context switches per pipeline batch, and a
// sysmon polling every 20 µs: a quarter of the node's CPU in profiles
// under redis-benchmark. Calls on a nonblocking socket cannot block, so
// they need not release the P (as the runtime's own nonblocking calls do
// not).
type rawIO struct {
	rc              syscall.RawConn
	p               []byte
	n               int
	err             error
	readFn, writeFn func(fd uintptr) bool // bound once: no closure per call
}

// newConnIO returns the reader and writer the server uses for nc: raw
// system calls for a socket, nc itself otherwise.
func newConnIO(nc net.Conn) io.ReadWriter {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nc
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nc
	}
	c := &rawIO{rc: rc}
	c.readFn, c.writeFn = c.read, c.write
	return c
}

func (c *rawIO) read(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(c.p))), uintptr(len(c.p)))
		switch e {
		case 0:
			c.n = int(n)
			if n == 0 {
				c.err = io.EOF
			}
			return true
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // wait in the poller, then call again
		default:
			c.err = e
			return true
		}
	}
}

// Read reads once: what the socket has, or waits until it has something.
func (c *rawIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.p, c.n, c.err = p, 0, nil
	err := c.rc.Read(c.readFn)
	c.p = nil
	if err != nil {
		return 0, err
	}
	return c.n, c.err
}

func (c *rawIO) write(fd uintptr) bool {
	for len(c.p) > 0 {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(c.p))), uintptr(len(c.p)))
		switch e {
		case 0:
			c.n += int(n)
			c.p = c.p[n:]
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // send buffer full: wait in the poller
		default:
			c.err = e
			return true
		}
	}
	return true
}

// Write writes all of p, waiting whenever the send buffer is full.
func (c *rawIO) Write(p []byte) (int, error) {
	c.p, c.n, c.err = p, 0, nil
	err := c.rc.Write(c.writeFn)
	c.p = nil
	if err != nil {
		return c.n, err
	}
	return c.n, c.err
}
