package server

import (
	"bufio"
	"net"
	"syscall"
	"testing"
)

// TestRawWriteOutsideACallback: a reply written outside the poller's
// callbacks (a blocking command's -UNBLOCKED, flushed as its connection
// closes) goes through the poller to the connection's own socket, never
// through a descriptor number held from an earlier callback or never set.
func TestRawWriteOutsideACallback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, _ := dial(t, ln.Addr().String())
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	rc, err := sc.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	rw := &rawIO{rc: rc, fd: noFD}
	rw.writeFn = rw.write
	const reply = "-UNBLOCKED force unblock from blocking operation\r\n"
	if n, err := rw.Write([]byte(reply)); err != nil || n != len(reply) {
		t.Fatalf("Write = %d, %v", n, err)
	}
	line, err := bufio.NewReader(client).ReadString('\n')
	if err != nil || line != reply {
		t.Fatalf("client read %q, %v", line, err)
	}
	if rw.fd != noFD {
		t.Fatalf("fd = %d after a write outside a callback", rw.fd)
	}
}
