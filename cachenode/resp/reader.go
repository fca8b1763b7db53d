package resp

import (
	"bytes"
	"errors"
	"io"
)

// Protocol limits, as Redis enforces them (networking.c).
const (
	// DefaultMaxBulkLen is Redis's proto-max-bulk-len default (512 MB).
	DefaultMaxBulkLen = 512 << 20
	// DefaultMaxMultibulkLen caps a command's argument count. Redis allows
	// up to INT_MAX; a million arguments is far past any real command and
	// keeps a declared count from meaning gigabytes of argument headers.
	DefaultMaxMultibulkLen = 1 << 20
	// DefaultMaxQueryBuffer is Redis's client-query-buffer-limit (1 GB):
	// a connection whose unparsed input passes it is closed.
	DefaultMaxQueryBuffer = 1 << 30
	// MaxInlineLen is Redis's PROTO_INLINE_MAX_SIZE: the longest inline
	// command, multibulk count line or bulk length line.
	MaxInlineLen = 64 << 10
	// Before AUTH (when auth is required) Redis accepts at most 10
	// arguments of at most 16 KB each.
	unauthMaxMultibulkLen = 10
	unauthMaxBulkLen      = 16384

	// initialBufSize is each connection's read buffer (Redis's
	// PROTO_IOBUF_LEN); it grows for larger frames and shrinks back once
	// they are consumed.
	initialBufSize = 16 << 10
)

// ErrQueryBufferLimit is returned by Fill when a connection's unparsed
// input passes Limits.MaxQueryBuffer. Redis closes such a client without a
// reply.
var ErrQueryBufferLimit = errors.New("resp: query buffer limit reached")

// ProtocolError is malformed input. Redis answers it with
// "-ERR Protocol error: <Msg>" and closes the connection after the replies
// to the commands before it.
type ProtocolError struct{ Msg string }

func (e *ProtocolError) Error() string { return "resp: protocol error: " + e.Msg }

// Limits bound what a Reader accepts. Zero fields take the defaults.
type Limits struct {
	MaxBulkLen      int
	MaxMultibulkLen int
	MaxQueryBuffer  int
}

// Reader parses commands (RESP multibulk arrays of bulk strings, and inline
// commands split as redis-cli and Redis's sdssplitargs do) from a stream,
// with Redis's protocol errors. It does not allocate per command: the
// arguments it returns alias its buffer.
//
// Use: call Next until it returns no command, then Fill (one Read), and
// again. Replies to everything Next returned before it ran dry can be
// flushed right before Fill, which is when the client has sent no more.
// A Reader is not safe for concurrent use.
type Reader struct {
	rd  io.Reader
	lim Limits
	buf []byte
	r   int // buf[r:w] is unparsed input
	w   int

	// Unauthenticated applies Redis's limits for a connection that has not
	// authenticated while auth is required (10 arguments, 16 KB each). The
	// caller sets it before each Next.
	Unauthenticated bool

	// A multibulk command parsed up to pos (relative to r) when the input
	// ran out, so a large command arriving in many reads is parsed once.
	left    int   // arguments still to read; 0 = between commands
	bulkLen int   // length of the next argument, -1 = its header is not read yet
	pos     int   // offset from r where parsing resumes
	spans   []int // start, end of each argument read so far, relative to r
	args    [][]byte
}

// NewReader returns a Reader of rd.
func NewReader(rd io.Reader, lim Limits) *Reader {
	if lim.MaxBulkLen <= 0 {
		lim.MaxBulkLen = DefaultMaxBulkLen
	}
	if lim.MaxMultibulkLen <= 0 {
		lim.MaxMultibulkLen = DefaultMaxMultibulkLen
	}
	if lim.MaxQueryBuffer <= 0 {
		lim.MaxQueryBuffer = DefaultMaxQueryBuffer
	}
	return &Reader{rd: rd, lim: lim, buf: make([]byte, initialBufSize), bulkLen: -1}
}

// Buffered is the number of unparsed input bytes.
func (r *Reader) Buffered() int { return r.w - r.r }

// Next returns the next complete command already in the buffer, or nil
// when the buffer holds no complete command (call Fill). Empty commands
// (*0, blank lines) are skipped, as Redis does. The arguments alias the
// buffer and stay valid until the next call to Next or Fill; the caller
// must not retain them. After a *ProtocolError the Reader must not be used
// again.
func (r *Reader) Next() ([][]byte, error) {
	for r.r < r.w {
		var (
			args     [][]byte
			consumed bool
			err      error
		)
		if r.left > 0 || r.buf[r.r] == '*' {
			args, consumed, err = r.multibulk()
		} else {
			args, consumed, err = r.inline()
		}
		if err != nil || args != nil {
			return args, err
		}
		if !consumed {
			return nil, nil // incomplete
		}
	}
	return nil, nil
}

// multibulk parses *<n>\r\n followed by n bulk strings $<len>\r\n<bytes>\r\n,
// resuming where it stopped. Without a command, consumed reports whether
// input was used up (an empty command) rather than found incomplete.
func (r *Reader) multibulk() (args [][]byte, consumed bool, err error) {
	b := r.buf[r.r:r.w]
	if r.left == 0 {
		line, next, err := readLine(b, 0, "too big mbulk count string")
		if err != nil || next < 0 {
			return nil, false, err
		}
		n, ok := parseInt(line[1:])
		switch {
		case !ok:
			return nil, false, &ProtocolError{"invalid multibulk length"}
		case r.Unauthenticated && n > unauthMaxMultibulkLen:
			return nil, false, &ProtocolError{"unauthenticated multibulk length"}
		case n > int64(r.lim.MaxMultibulkLen):
			return nil, false, &ProtocolError{"invalid multibulk length"}
		case n <= 0:
			r.r += next
			return nil, true, nil
		}
		r.left, r.pos, r.bulkLen = int(n), next, -1
		r.spans = r.spans[:0]
	}
	for r.left > 0 {
		if r.bulkLen < 0 {
			line, next, err := readLine(b, r.pos, "too big bulk count string")
			if err != nil || next < 0 {
				return nil, false, err
			}
			if c := b[r.pos]; c != '$' { // the CR when the line is empty
				return nil, false, &ProtocolError{"expected '$', got '" + string([]byte{c}) + "'"}
			}
			n, ok := parseInt(line[1:])
			if !ok || n < 0 || n > int64(r.lim.MaxBulkLen) {
				return nil, false, &ProtocolError{"invalid bulk length"}
			}
			if r.Unauthenticated && n > unauthMaxBulkLen {
				return nil, false, &ProtocolError{"unauthenticated bulk length"}
			}
			r.bulkLen, r.pos = int(n), next
		}
		// As Redis, the two bytes after the data are taken as CRLF
		// without looking at them.
		if len(b)-r.pos < r.bulkLen+2 {
			return nil, false, nil
		}
		r.spans = append(r.spans, r.pos, r.pos+r.bulkLen)
		r.pos += r.bulkLen + 2
		r.bulkLen = -1
		r.left--
	}
	r.args = r.args[:0]
	for i := 0; i < len(r.spans); i += 2 {
		r.args = append(r.args, b[r.spans[i]:r.spans[i+1]:r.spans[i+1]])
	}
	r.r += r.pos
	r.pos = 0
	return r.args, true, nil
}

// readLine finds the line starting at b[from:] that ends in CR plus one
// more byte (Redis looks for the CR and skips two bytes). It returns the
// line without them and the offset after them, or next < 0 when the line
// is incomplete.
func readLine(b []byte, from int, tooBig string) (line []byte, next int, err error) {
	i := bytes.IndexByte(b[from:], '\r')
	if i < 0 || from+i+2 > len(b) {
		if len(b)-from > MaxInlineLen {
			return nil, -1, &ProtocolError{tooBig}
		}
		return nil, -1, nil
	}
	return b[from : from+i], from + i + 2, nil
}

// inline parses one line of space-separated arguments (consumed: a blank
// line was skipped).
func (r *Reader) inline() (args [][]byte, consumed bool, err error) {
	b := r.buf[r.r:r.w]
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 {
		if len(b) > MaxInlineLen {
			return nil, false, &ProtocolError{"too big inline request"}
		}
		return nil, false, nil
	}
	line := b[:nl]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	args, ok := splitArgs(line, r.args[:0])
	if !ok {
		return nil, false, &ProtocolError{"unbalanced quotes in request"}
	}
	r.args = args
	r.r += nl + 1
	if len(args) == 0 {
		return nil, true, nil
	}
	return args, true, nil
}

// splitArgs splits line in place as Redis's sdssplitargs does: arguments
// separated by whitespace, "double quotes" with \n \r \t \b \a \xHH and \"
// escapes, 'single quotes' with \'; a closing quote must be followed by a
// space or the end. Input from a NUL on is ignored (Redis parses a C
// string). Unescaped output is never longer than its input, so it is
// written over the line itself.
func splitArgs(line []byte, args [][]byte) ([][]byte, bool) {
	if i := bytes.IndexByte(line, 0); i >= 0 {
		line = line[:i]
	}
	p := 0
	for {
		for p < len(line) && isSpace(line[p]) {
			p++
		}
		if p == len(line) {
			return args, true
		}
		start, out := p, p // the argument is written to line[start:out]
		inDQ, inSQ := false, false
	arg:
		for ; ; p++ {
			switch {
			case inDQ:
				if p == len(line) {
					return args, false
				}
				c := line[p]
				switch {
				case c == '\\' && p+3 < len(line) && line[p+1] == 'x' && isHex(line[p+2]) && isHex(line[p+3]):
					c = unhex(line[p+2])<<4 | unhex(line[p+3])
					p += 3
				case c == '\\' && p+1 < len(line):
					p++
					switch c = line[p]; c {
					case 'n':
						c = '\n'
					case 'r':
						c = '\r'
					case 't':
						c = '\t'
					case 'b':
						c = '\b'
					case 'a':
						c = '\a'
					}
				case c == '"':
					if p+1 < len(line) && !isSpace(line[p+1]) {
						return args, false
					}
					p++
					break arg
				}
				line[out] = c
				out++
			case inSQ:
				if p == len(line) {
					return args, false
				}
				c := line[p]
				switch {
				case c == '\\' && p+1 < len(line) && line[p+1] == '\'':
					p++
					c = '\''
				case c == '\'':
					if p+1 < len(line) && !isSpace(line[p+1]) {
						return args, false
					}
					p++
					break arg
				}
				line[out] = c
				out++
			default:
				if p == len(line) {
					break arg
				}
				switch c := line[p]; c {
				case ' ', '\n', '\r', '\t':
					break arg
				case '"':
					inDQ = true
				case '\'':
					inSQ = true
				default:
					line[out] = c
					out++
				}
			}
		}
		args = append(args, line[start:out:out])
	}
}

// isSpace is C's isspace in the C locale.
func isSpace(c byte) bool { return c == ' ' || (c >= '\t' && c <= '\r') }

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

// parseInt is Redis's string2ll: an optional '-', no '+', no leading
// zeros, no spaces, within int64.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 || b[0] < '1' || b[0] > '9' {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	if v > 1<<63-1 {
		return 0, false // 19 digits fit in a uint64; int64 stops at 9223372036854775807
	}
	if neg {
		return -int64(v), true
	}
	return int64(v), true
}

// Release drops the input buffer when it holds no unparsed input (an idle
// connection need not pin it, as Redis frees an idle client's query
// buffer); it reports whether it did. The next Fill allocates a new one,
// after asking the underlying reader whether input is ready when it is a
// Waiter.
func (r *Reader) Release() bool {
	if r.r != r.w || r.left != 0 || r.buf == nil {
		return false
	}
	r.buf, r.r, r.w = nil, 0, 0
	clear(r.args[:cap(r.args)]) // they alias the buffer
	return true
}

// Waiter is an io.Reader that can tell, without a buffer, whether a read
// would return anything: Ready returns nil when input (or the end) is
// ready, or the error a Read would return instead of waiting. A Reader
// whose buffer was released asks it before allocating another.
type Waiter interface{ Ready() error }

// Fill reads once from the underlying reader into the buffer, first
// moving unparsed input to the front and growing the buffer when a
// command does not fit. It returns the read's error only when no byte was
// read. Arguments returned by Next before Fill are invalid after it.
func (r *Reader) Fill() error {
	if r.buf == nil {
		if wt, ok := r.rd.(Waiter); ok {
			if err := wt.Ready(); err != nil {
				return err
			}
		}
		r.buf = make([]byte, initialBufSize)
	}
	if r.r == r.w && r.left == 0 && len(r.buf) > initialBufSize {
		r.buf = make([]byte, initialBufSize) // do not pin a large frame's buffer
		r.r, r.w = 0, 0
	}
	if r.r > 0 {
		r.w = copy(r.buf, r.buf[r.r:r.w])
		r.r = 0
	}
	if r.w == len(r.buf) {
		if r.w >= r.lim.MaxQueryBuffer {
			return ErrQueryBufferLimit
		}
		size := 2 * len(r.buf)
		if r.left > 0 && r.bulkLen >= 0 {
			// The argument's length is known: grow at most to hold it, but
			// only as fast as the client sends (doubling).
			size = min(size, max(r.pos+r.bulkLen+2, len(r.buf)+1))
		}
		size = min(size, r.lim.MaxQueryBuffer)
		nb := make([]byte, size)
		copy(nb, r.buf[:r.w])
		r.buf = nb
	}
	n, err := r.rd.Read(r.buf[r.w:])
	r.w += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}
