package bus

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"testing"
	"time"
)

func start(t *testing.T, s *Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after cancel")
		}
	})
	return lis.Addr().String()
}

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func b(s ...string) [][]byte {
	out := make([][]byte, len(s))
	for i, x := range s {
		out[i] = []byte(x)
	}
	return out
}

func TestAuthAndRequestReply(t *testing.T) {
	s := &Server{Secret: "s3cret"}
	s.Handle("ECHO", func(c *Conn, args [][]byte) {
		c.W.Array(len(args) - 1)
		for _, a := range args[1:] {
			c.W.Bulk(a)
		}
	})
	s.Handle("count", func(c *Conn, args [][]byte) { c.W.Int(int64(len(args))) })
	addr := start(t, s)
	ctx := tctx(t)

	if _, err := Dial(ctx, addr, "wrong"); err == nil {
		t.Fatal("Dial with a wrong secret succeeded")
	} else if re := (*ReplyError)(nil); !errors.As(err, &re) || re.Code() != "WRONGPASS" {
		t.Fatalf("wrong secret: %v", err)
	}
	noauth, err := Dial(ctx, addr, "")
	if err != nil {
		t.Fatal(err)
	}
	defer noauth.Close()
	if _, err := noauth.Do(ctx, b("ECHO", "x")...); !isReplyError(err, "NOAUTH") {
		t.Fatalf("unauthenticated ECHO: %v", err)
	}

	c, err := Dial(ctx, addr, "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Do(ctx, b("echo", "a", "", "bin\r\n\x00")...)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Array) != 3 || string(r.Array[0].Str) != "a" || len(r.Array[1].Str) != 0 || string(r.Array[2].Str) != "bin\r\n\x00" {
		t.Fatalf("ECHO = %v", r)
	}
	if r, err := c.Do(ctx, b("COUNT", "1", "2")...); err != nil || r.Kind != KindInt || r.Int != 3 {
		t.Fatalf("COUNT = %v, %v", r, err)
	}
	if r, err := c.Do(ctx, b("PING")...); err != nil || string(r.Str) != "PONG" {
		t.Fatalf("PING = %v, %v", r, err)
	}
	if _, err := c.Do(ctx, b("NOPE")...); !isReplyError(err, "ERR") {
		t.Fatalf("unknown command: %v", err)
	}
}

// TestStreamHandler: a handler that keeps the connection, streams data and
// reads the peer's acks, as SYNC does; Serve's cancel ends it.
func TestStreamHandler(t *testing.T) {
	s := &Server{}
	acked := make(chan int64, 10)
	s.Handle("STREAM", func(c *Conn, args [][]byte) {
		c.W.Simple("STREAMING")
		if err := c.Flush(); err != nil {
			return
		}
		readerDone := make(chan struct{})
		defer func() { c.Close(); <-readerDone }()
		go func() {
			defer close(readerDone)
			for {
				args, err := c.ReadCommand(time.Minute)
				if err != nil {
					c.Close()
					return
				}
				n, _ := strconv.ParseInt(string(args[1]), 10, 64)
				acked <- n
			}
		}()
		for i := 0; ; i++ {
			if _, err := c.Write([]byte("chunk" + strconv.Itoa(i) + "\n")); err != nil {
				return
			}
			select {
			case <-c.Context().Done():
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	addr := start(t, s)
	ctx := tctx(t)
	c, err := Dial(ctx, addr, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if r, err := c.Do(ctx, b("STREAM")...); err != nil || string(r.Str) != "STREAMING" {
		t.Fatalf("STREAM = %v, %v", r, err)
	}
	for i := range 3 {
		if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		line, err := c.Reader().ReadString('\n')
		if err != nil || line != "chunk"+strconv.Itoa(i)+"\n" {
			t.Fatalf("chunk %d = %q, %v", i, line, err)
		}
		if err := c.Send(b("ACK", strconv.Itoa(i))...); err != nil {
			t.Fatal(err)
		}
		if got := <-acked; got != int64(i) {
			t.Fatalf("ack %d, want %d", got, i)
		}
	}
}

func TestReadReply(t *testing.T) {
	for in, want := range map[string]string{
		"+OK\r\n":                 "OK",
		":-42\r\n":                "-42",
		"$3\r\nabc\r\n":           "abc",
		"$-1\r\n":                 "(nil)",
		"*2\r\n$1\r\na\r\n:1\r\n": "[a 1]",
		"-ERR bad thing\r\n":      "ERR bad thing",
		"*1\r\n*1\r\n+deep\r\n":   "[[deep]]",
		"*0\r\n":                  "[]",
	} {
		r, err := ReadReply(bufio.NewReader(bytes.NewBufferString(in)))
		if err != nil || r.String() != want {
			t.Errorf("ReadReply(%q) = %v, %v; want %s", in, r, err, want)
		}
	}
	for _, in := range []string{"?x\r\n", ":x\r\n", "$5\r\nabc\r\n", "$3\r\nabcXY", "*99999999999\r\n", "$-2\r\n", "+OK\n",
		"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n"} {
		if _, err := ReadReply(bufio.NewReader(bytes.NewBufferString(in))); err == nil {
			t.Errorf("ReadReply(%q) accepted", in)
		}
	}
	if _, err := ReadReply(bufio.NewReader(bytes.NewBufferString("$3\r\nab"))); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated bulk: %v", err)
	}
}

// FuzzReadReply: any input ends in a reply or an error, never a panic, and
// the memory a reply holds is bounded by the input.
func FuzzReadReply(f *testing.F) {
	for _, s := range []string{"+OK\r\n", ":1\r\n", "$3\r\nabc\r\n", "*2\r\n$1\r\na\r\n:1\r\n", "-ERR x\r\n", "$-1\r\n", "*-1\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReader(bytes.NewReader(in))
		for {
			r, err := ReadReply(br)
			if err != nil {
				return
			}
			if size(r) > len(in) {
				t.Fatalf("reply of %d bytes from %d bytes of input", size(r), len(in))
			}
		}
	})
}

func size(r Reply) int {
	n := len(r.Str)
	for _, e := range r.Array {
		n += size(e) + 1
	}
	return n
}

// isReplyError reports whether err is a *ReplyError with the given code.
func isReplyError(err error, code string) bool {
	var re *ReplyError
	return errors.As(err, &re) && re.Code() == code
}
