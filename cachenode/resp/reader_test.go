package resp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// readAll parses every command from rd, copying the arguments, until the
// input ends or a protocol error.
func readAll(t testing.TB, rd *Reader) ([][]string, error) {
	var cmds [][]string
	for {
		args, err := rd.Next()
		if err != nil {
			return cmds, err
		}
		if args == nil {
			if err := rd.Fill(); err != nil {
				return cmds, err
			}
			continue
		}
		cmd := make([]string, len(args))
		for i, a := range args {
			cmd[i] = string(a)
		}
		cmds = append(cmds, cmd)
	}
}

// chunkReader returns its input in reads of the given sizes, cycling.
type chunkReader struct {
	data  []byte
	sizes []int
	i     int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.data), c.sizes[c.i%len(c.sizes)])
	c.i++
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func TestReaderParses(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // commands as %q
		err  string // "" = clean end of input
	}{
		{"*1\r\n$4\r\nPING\r\n", `[["PING"]]`, ""},
		{"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", `[["SET" "k" ""] ["GET" "k"]]`, ""},
		{"PING\r\nSET k v\nGET k\r\n", `[["PING"] ["SET" "k" "v"] ["GET" "k"]]`, ""},
		{"*0\r\n*-1\r\n\r\n   \r\nPING\r\n", `[["PING"]]`, ""},
		{"SET k \"a b\\r\\n\\x41\\\"\" 'it\\'s'\r\n", `[["SET" "k" "a b\r\nA\"" "it's"]]`, ""},
		{"a\"b c\" d\r\n", `[["ab c" "d"]]`, ""},
		{"a\tb\x00c d\r\n", `[["a" "b"]]`, ""},
		{"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPI", `[["GET" "k"]]`, "EOF"},
		{"*1\r\n$abc\r\n", `[]`, "invalid bulk length"},
		{"*1\r\n$-1\r\n", `[]`, "invalid bulk length"},
		{"*1\r\n$01\r\n", `[]`, "invalid bulk length"},
		{"*x\r\n", `[]`, "invalid multibulk length"},
		{"*\r\n", `[]`, "invalid multibulk length"},
		{"*+1\r\n", `[]`, "invalid multibulk length"},
		{"*2000000\r\n", `[]`, "invalid multibulk length"},
		{"*1\r\n:1\r\n", `[]`, "expected '$', got ':'"},
		{"PING\r\n*1\r\n$600000000\r\n", `[["PING"]]`, "invalid bulk length"},
		{"GET \"k\r\n", `[]`, "unbalanced quotes in request"},
		{"GET \"k\"x\r\n", `[]`, "unbalanced quotes in request"},
		{"GET 'k\r\n", `[]`, "unbalanced quotes in request"},
		{"*1\r\n" + strings.Repeat("9", 70000), `[]`, "too big bulk count string"},
		{"*" + strings.Repeat("9", 70000), `[]`, "too big mbulk count string"},
		{strings.Repeat("a", 70000), `[]`, "too big inline request"},
	} {
		for _, sizes := range [][]int{{1 << 30}, {1}, {3, 7}} {
			rd := NewReader(&chunkReader{data: []byte(tc.in), sizes: sizes}, Limits{})
			cmds, err := readAll(t, rd)
			if got := fmt.Sprintf("%q", cmds); got != tc.want && !(got == "[]" && tc.want == "[]") {
				t.Errorf("%.40q in reads of %v: commands %s, want %s", tc.in, sizes, got, tc.want)
			}
			var pe *ProtocolError
			switch {
			case tc.err == "EOF":
				if !errors.Is(err, io.EOF) {
					t.Errorf("%.40q: err %v, want EOF", tc.in, err)
				}
			case tc.err == "":
				if !errors.Is(err, io.EOF) || rd.Buffered() != 0 {
					t.Errorf("%.40q: err %v with %d bytes left, want a clean EOF", tc.in, err, rd.Buffered())
				}
			case !errors.As(err, &pe) || pe.Msg != tc.err:
				t.Errorf("%.40q in reads of %v: err %v, want protocol error %q", tc.in, sizes, err, tc.err)
			}
		}
	}
}

func TestReaderUnauthenticatedLimits(t *testing.T) {
	for _, tc := range []struct{ in, err string }{
		{"*11\r\n", "unauthenticated multibulk length"},
		{"*2\r\n$4\r\nAUTH\r\n$16385\r\n", "unauthenticated bulk length"},
	} {
		rd := NewReader(strings.NewReader(tc.in), Limits{})
		rd.Unauthenticated = true
		_, err := readAll(t, rd)
		var pe *ProtocolError
		if !errors.As(err, &pe) || pe.Msg != tc.err {
			t.Errorf("%q: %v, want %q", tc.in, err, tc.err)
		}
	}
	rd := NewReader(strings.NewReader("*10\r\n"+strings.Repeat("$16384\r\n"+strings.Repeat("x", 16384)+"\r\n", 10)), Limits{})
	rd.Unauthenticated = true
	if cmds, err := readAll(t, rd); len(cmds) != 1 || !errors.Is(err, io.EOF) {
		t.Errorf("10 arguments of 16 KB: %d commands, %v", len(cmds), err)
	}
}

// TestReaderLargeFrames checks a value larger than the buffer arriving in
// pieces, the buffer shrinking back afterwards, and the query buffer limit.
func TestReaderLargeFrames(t *testing.T) {
	big := strings.Repeat("v", 1<<20)
	in := "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$" + fmt.Sprint(len(big)) + "\r\n" + big + "\r\nPING\r\n"
	rd := NewReader(&chunkReader{data: []byte(in), sizes: []int{1000, 65536, 1}}, Limits{})
	cmds, err := readAll(t, rd)
	if !errors.Is(err, io.EOF) || len(cmds) != 2 || cmds[0][2] != big || cmds[1][0] != "PING" {
		t.Fatalf("got %d commands, %v", len(cmds), err)
	}
	if len(rd.buf) != initialBufSize {
		t.Errorf("buffer %d bytes after the large frame, want %d", len(rd.buf), initialBufSize)
	}
	if len(rd.buf) > 2<<20 {
		t.Errorf("buffer grew to %d for a 1 MB value", len(rd.buf))
	}

	rd = NewReader(strings.NewReader(in), Limits{MaxQueryBuffer: 64 << 10})
	if _, err := readAll(t, rd); !errors.Is(err, ErrQueryBufferLimit) {
		t.Errorf("over the query buffer limit: %v", err)
	}
	rd = NewReader(strings.NewReader(in), Limits{MaxBulkLen: 1000})
	var pe *ProtocolError
	if _, err := readAll(t, rd); !errors.As(err, &pe) || pe.Msg != "invalid bulk length" {
		t.Errorf("over MaxBulkLen: %v", err)
	}
}

// TestReaderDoesNotAllocate: a pipelined batch parses without allocating
// once the Reader's slices have grown.
func TestReaderDoesNotAllocate(t *testing.T) {
	batch := benchBatch(16)
	lr := &loopReader{data: batch}
	rd := NewReader(lr, Limits{})
	allocs := testing.AllocsPerRun(100, func() {
		for n := 0; n < 16; {
			args, err := rd.Next()
			if err != nil {
				t.Fatal(err)
			}
			if args == nil {
				if err := rd.Fill(); err != nil {
					t.Fatal(err)
				}
				continue
			}
			n++
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per batch", allocs)
	}
}

// loopReader returns data on every Read, whole.
type loopReader struct{ data []byte }

func (l *loopReader) Read(p []byte) (int, error) { return copy(p, l.data), nil }

// benchBatch is n pipelined SETs with 100-byte values, as redis-benchmark
// sends them.
func benchBatch(n int) []byte {
	var b bytes.Buffer
	val := strings.Repeat("x", 100)
	for i := range n {
		key := fmt.Sprintf("key:%012d", i)
		fmt.Fprintf(&b, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(key), key, len(val), val)
	}
	return b.Bytes()
}

// FuzzReader: random input parsed whole and in small reads gives the same
// commands and the same outcome; it never panics or hangs, and the only
// errors are protocol errors, the query buffer limit and the end of input.
func FuzzReader(f *testing.F) {
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n", "PING\r\n", "SET k \"a\\x41\" 'b\\''\r\n", "*0\r\n", "*-1\r\n",
		"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", "*1\r\n$abc\r\n", "\"unbalanced\r\n", "*3\r\n$3\r\nSET\r\n$1\r\n",
		string(benchBatch(3)),
	} {
		f.Add([]byte(s), uint8(1), uint8(5))
	}
	f.Fuzz(func(t *testing.T, in []byte, a, b uint8) {
		lim := Limits{MaxBulkLen: 1 << 16, MaxMultibulkLen: 1 << 10, MaxQueryBuffer: 1 << 20}
		whole, werr := readAll(t, NewReader(bytes.NewReader(bytes.Clone(in)), lim))
		parts, perr := readAll(t, NewReader(&chunkReader{data: bytes.Clone(in), sizes: []int{int(a) + 1, int(b) + 1}}, lim))
		for _, err := range []error{werr, perr} {
			var pe *ProtocolError
			if !errors.As(err, &pe) && !errors.Is(err, io.EOF) && !errors.Is(err, ErrQueryBufferLimit) {
				t.Fatalf("unexpected error %v", err)
			}
		}
		if len(in) >= MaxInlineLen {
			return // how much is buffered decides "too big" errors, as in Redis
		}
		if fmt.Sprintf("%q", whole) != fmt.Sprintf("%q", parts) || fmt.Sprint(werr) != fmt.Sprint(perr) {
			t.Fatalf("whole: %q %v\nin reads: %q %v", whole, werr, parts, perr)
		}
	})
}

// waitReader is a Waiter over a queue of chunks: Ready reports errNothing
// while the queue is empty.
type waitReader struct {
	chunks [][]byte
	asked  int
}

var errNothing = errors.New("nothing yet")

func (w *waitReader) Ready() error {
	w.asked++
	if len(w.chunks) == 0 {
		return errNothing
	}
	return nil
}

func (w *waitReader) Read(p []byte) (int, error) {
	if len(w.chunks) == 0 {
		return 0, errNothing
	}
	n := copy(p, w.chunks[0])
	w.chunks = w.chunks[1:]
	return n, nil
}

// TestReaderRelease: the buffer goes only between commands; a released
// Reader asks its Waiter before it allocates again, and parses on.
func TestReaderRelease(t *testing.T) {
	w := &waitReader{chunks: [][]byte{[]byte("*2\r\n$4\r\nECHO\r\n$2\r\nab\r\n*1\r\n$4\r\nPI")}}
	rd := NewReader(w, Limits{})
	if err := rd.Fill(); err != nil {
		t.Fatal(err)
	}
	if args, err := rd.Next(); err != nil || len(args) != 2 || string(args[1]) != "ab" {
		t.Fatalf("Next = %q, %v", args, err)
	}
	if args, _ := rd.Next(); args != nil || rd.Release() {
		t.Fatalf("released with a partial command buffered (next %q)", args)
	}
	w.chunks = [][]byte{[]byte("NG\r\n")}
	if err := rd.Fill(); err != nil {
		t.Fatal(err)
	}
	if args, err := rd.Next(); err != nil || len(args) != 1 || string(args[0]) != "PING" {
		t.Fatalf("Next = %q, %v", args, err)
	}
	if args, _ := rd.Next(); args != nil || !rd.Release() || rd.buf != nil {
		t.Fatal("not released between commands")
	}
	if err := rd.Fill(); !errors.Is(err, errNothing) || rd.buf != nil || w.asked != 1 {
		t.Fatalf("Fill with nothing ready = %v (buffer %d bytes, Ready asked %d times)", err, len(rd.buf), w.asked)
	}
	w.chunks = [][]byte{[]byte("PING\r\n")}
	if err := rd.Fill(); err != nil {
		t.Fatal(err)
	}
	if args, err := rd.Next(); err != nil || len(args) != 1 || string(args[0]) != "PING" {
		t.Fatalf("after release: Next = %q, %v", args, err)
	}
}
