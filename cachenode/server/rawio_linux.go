//go:build linux

package server

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"

	"github.com/portico-io/portico/cachenode/resp"
)

// rawIO reads and writes a nonblocking socket with raw system calls, and
// waits in Go's network poller (syscall.RawConn) only when the socket has
// nothing to read or no room to write.
//
// Raw calls: a write to a loopback or LAN peer routinely takes over 20 µs
// (the kernel runs the peer's receive path in it), and a P in a syscall
// that long is retaken by sysmon and handed to another thread. At
// GOMAXPROCS=1 that was a futex wake and two context switches per pipeline
// batch, and a sysmon polling every 20 µs: a quarter of the node's CPU in
// profiles under redis-benchmark. Calls on a nonblocking socket cannot
// block, so they need not release the P (as the runtime's own nonblocking
// calls do not).
//
// No read to EAGAIN: the whole connection runs inside one RawConn.Read
// callback (serveRaw), so the poller's readiness is reset once, when the
// connection starts, and never between a read and the next wait. The
// poller registers sockets edge-triggered: every arrival of data after a
// read queues a readiness event, which either is already recorded when the
// callback returns false (the wait returns at once) or wakes the wait. So
// after a read that did not fill the buffer (the socket had no more) the
// replies are written and the goroutine waits without reading again: one
// read per batch instead of two (the second returned EAGAIN), as in
// Redis's event loop. A read that filled the buffer is followed by
// another read, since no event announces data that had already arrived.
type rawIO struct {
	rc syscall.RawConn
	// fd is the socket inside rc's callbacks, which hold a reference to it,
	// and noFD outside them (when rc is set): a descriptor used outside a
	// callback may have been closed by CLIENT KILL and reused by another
	// connection meanwhile. An event loop's connection (rc nil) owns fd.
	fd      uintptr
	full    bool // the last read filled the buffer: the socket may hold more
	active  bool // a read returned data since the last idle check
	p       []byte
	n       int
	err     error
	writeFn func(fd uintptr) bool // bound once: no closure per call
	// pending: replies an event loop's connection had no room for in the
	// socket (rc is nil there: Write never waits); its own goroutine
	// writes them first.
	pending []byte
}

// deadliner is the connection rawLoop serves: a *net.TCPConn, or the
// *os.File of one that left an event loop.
type deadliner interface {
	SetReadDeadline(time.Time) error
}

// shutdown ends the connection of c (a *net.TCPConn, a *tls.Conn over
// one, or an *os.File) from another goroutine: reads see its end, writes
// fail, and the goroutine serving it closes it. Unlike Close it does not
// wait for that goroutine to leave a RawConn callback.
func shutdown(c any) error {
	if t, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = t.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		if cl, ok := c.(interface{ Close() error }); ok {
			return cl.Close()
		}
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.Shutdown(int(fd), syscall.SHUT_RDWR) }); err != nil {
		return err
	}
	return serr
}

// noFD is rawIO.fd outside rc's callbacks.
const noFD = ^uintptr(0)

// errWouldBlock: the socket has nothing to read now.
var errWouldBlock = errors.New("server: read would block")

// serveRaw serves c on nc's socket with raw system calls inside one
// RawConn.Read callback; false when nc has no socket to do so (then the
// caller serves it through net.Conn).
func (s *Server) serveRaw(nc net.Conn, c *conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	rw := &rawIO{rc: rc, fd: noFD}
	rw.writeFn = rw.write
	c.rd = resp.NewReader(rw, s.cfg.Limits)
	c.out = rw
	c.nowMs = time.Now().UnixMilli() // read with every input: the idle timeout counts from it
	s.rawLoop(nc, rw, c, false)
	return true
}

// rawLoop serves c on rw until the connection ends; resume: c's buffer may
// hold commands to run before the next read (a connection coming from an
// event loop).
func (s *Server) rawLoop(nc deadliner, rw *rawIO, c *conn, resume bool) {
	rc := rw.rc
	done := false
	// Called at once, then each time the poller reports the socket
	// readable; true ends the connection, or leaves the callback for a
	// blocking command to wait (c.sess.Blocked).
	serve := func(fd uintptr) bool {
		rw.fd = fd
		if resume { // a blocking command completed, or the connection left an event loop: the commands after it
			resume = false
			if !c.run() {
				done = true
				return true
			}
			if c.sess.Blocked() {
				return true
			}
		}
		for {
			err := c.rd.Fill()
			if errors.Is(err, errWouldBlock) {
				return false // wait for the next arrival
			}
			if err != nil {
				c.fillFailed(err)
				done = true
				return true
			}
			c.nowMs, c.sinceClock = time.Now().UnixMilli(), 0
			if !c.run() {
				done = true
				return true
			}
			if c.sess.Blocked() {
				return true
			}
			if !rw.full {
				// The read drained the socket: anything sent since raises
				// an event, so wait for it instead of reading to EAGAIN.
				return false
			}
			if s.closing.Load() {
				done = true // a client that never pauses must not outlive Serve
				return true
			}
		}
	}
	for !done {
		if c.sess.Blocked() {
			if !s.waitBlockedRaw(nc, rw, c) {
				return
			}
			resume = true
		}
		// A FIN or reset that arrived with the last data raised its event
		// before that read, and no other follows: without this deadline a
		// client that half-closes after its commands would keep its
		// connection open forever (Redis closes it). When the deadline
		// passes the callback starts again with a read, which sees the
		// end; a connection that is merely idle reads EAGAIN and waits on.
		check := s.cfg.IdleCheck
		timeout := c.eng.IdleTimeout()
		if timeout > 0 {
			check = min(check, max(timeout-time.Since(time.UnixMilli(c.nowMs)), time.Millisecond))
		}
		if nc.SetReadDeadline(time.Now().Add(check)) != nil {
			return
		}
		err := rc.Read(serve)
		rw.fd = noFD
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
		if timeout > 0 && !c.sess.Blocked() && time.Since(time.UnixMilli(c.nowMs)) >= timeout {
			return // idle past CONFIG SET timeout: closed, as Redis does
		}
		// The deadline passed. A client that sent nothing for a whole
		// period gives its buffers back until it sends again.
		if !rw.active {
			c.idle()
		}
		rw.active = false
	}
}

// waitBlockedRaw is conn.waitBlocked on the raw socket: it waits in the
// poller, reading what arrives into the buffer until the blocking command
// completes (Wake interrupts the wait with a past deadline) or the client
// closes. The periodic deadline also sees an end that came with the last
// data, as serveRaw's does.
func (s *Server) waitBlockedRaw(nc deadliner, rw *rawIO, c *conn) bool {
	closed := false
	read := func(fd uintptr) bool {
		rw.fd = fd
		for {
			err := c.rd.Fill()
			if errors.Is(err, errWouldBlock) {
				return false
			}
			if err != nil {
				c.fillFailed(err)
				closed = true
				return true
			}
			if !rw.full {
				return false
			}
		}
	}
	for c.eng.ArmWait(c.sess, func() { _ = nc.SetReadDeadline(time.Now().Add(s.cfg.IdleCheck)) }) {
		err := rw.rc.Read(read)
		rw.fd = noFD
		if closed || (err != nil && !errors.Is(err, os.ErrDeadlineExceeded)) {
			return false
		}
	}
	return c.unblocked()
}

// Read reads once what the socket has: errWouldBlock when it has nothing.
// Called only inside the RawConn.Read callback (through resp.Reader.Fill).
func (c *rawIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, c.fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
		switch e {
		case 0:
			if n == 0 {
				return 0, io.EOF
			}
			c.full = int(n) == len(p)
			c.active = true
			return int(n), nil
		case syscall.EINTR:
		case syscall.EAGAIN:
			return 0, errWouldBlock
		default:
			return 0, e
		}
	}
}

// Ready peeks one byte without a buffer (resp.Waiter): errWouldBlock when
// the socket has nothing, so an idle connection whose buffer was released
// does not allocate one just to find out.
func (c *rawIO) Ready() error {
	var b [1]byte
	for {
		_, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, c.fd, uintptr(unsafe.Pointer(&b[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			return nil // data, or the end: Read reports which
		case syscall.EINTR:
		case syscall.EAGAIN:
			return errWouldBlock
		default:
			return e
		}
	}
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

// Write writes all of p: with raw calls while the send buffer has room,
// then through the poller (RawConn.Write), which waits for room and
// notices a closed connection. The connection does not read while a write
// waits: that is the back-pressure on a client that does not read. On an
// event loop's connection (no rc) what does not fit goes to pending.
func (c *rawIO) Write(p []byte) (int, error) {
	if c.rc == nil {
		if len(c.pending) == 0 {
			c.p, c.n, c.err = p, 0, nil
			c.write(c.fd)
			rest := c.p
			c.p = nil
			if c.err != nil || len(rest) == 0 {
				return c.n, c.err
			}
			c.pending = append(c.pending, rest...)
		} else {
			c.pending = append(c.pending, p...)
		}
		return len(p), nil
	}
	c.p, c.n, c.err = p, 0, nil
	if c.fd != noFD && c.write(c.fd) {
		c.p = nil
		return c.n, c.err
	}
	// The send buffer is full, or this is outside a callback (the reply
	// of a blocking command that completed while its client waited).
	err := c.rc.Write(c.writeFn)
	c.p = nil
	if err != nil {
		return c.n, err
	}
	return c.n, c.err
}
