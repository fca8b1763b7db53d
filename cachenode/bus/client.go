package bus

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/portico-io/portico/cachenode/resp"
)

// Client is one connection to a peer's bus port. Not safe for concurrent
// use.
type Client struct {
	nc net.Conn
	br *bufio.Reader
	w  resp.Writer
	// IOTimeout bounds a Do without a context deadline (default
	// DefaultIOTimeout).
	IOTimeout time.Duration
}

// Peer is how a node reaches its peers' bus ports: mutual TLS with its
// cachenode certificate when TLS is set (the peer must be a cachenode too),
// and the shared secret when Secret is set. The zero Peer dials plain TCP.
type Peer struct {
	TLS    *tls.Config
	Secret string
}

// Dial connects to addr, completes the TLS handshake and authenticates as
// p says.
func (p Peer) Dial(ctx context.Context, addr string) (*Client, error) {
	var nc net.Conn
	var err error
	if p.TLS != nil {
		d := tls.Dialer{Config: p.TLS}
		nc, err = d.DialContext(ctx, "tcp", addr)
	} else {
		var d net.Dialer
		nc, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("bus: dial %s: %w", addr, err)
	}
	c := &Client{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), IOTimeout: DefaultIOTimeout}
	if p.Secret != "" {
		if _, err := c.Do(ctx, []byte("AUTH"), []byte(p.Secret)); err != nil {
			nc.Close()
			return nil, fmt.Errorf("bus: auth to %s: %w", addr, err)
		}
	}
	return c, nil
}

// Dial connects to addr over plain TCP and, when secret is set,
// authenticates.
func Dial(ctx context.Context, addr, secret string) (*Client, error) {
	return Peer{Secret: secret}.Dial(ctx, addr)
}

// Do sends one command and reads its reply, within ctx's deadline or
// IOTimeout. An error reply is returned as a *ReplyError (with the Reply).
func (c *Client) Do(ctx context.Context, args ...[]byte) (Reply, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(c.IOTimeout)
	}
	if err := c.nc.SetDeadline(deadline); err != nil {
		return Reply{}, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := c.send(args); err != nil {
		return Reply{}, err
	}
	r, err := ReadReply(c.br)
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return r, err
	}
	if r.Kind == KindError {
		return r, &ReplyError{Msg: string(r.Str)}
	}
	return r, nil
}

// Send writes one command without reading a reply (a stream's acks), within
// IOTimeout.
func (c *Client) Send(args ...[]byte) error {
	if err := c.nc.SetWriteDeadline(time.Now().Add(c.IOTimeout)); err != nil {
		return err
	}
	return c.send(args)
}

func (c *Client) send(args [][]byte) error {
	c.w.Reset()
	c.w.Array(len(args))
	for _, a := range args {
		c.w.Bulk(a)
	}
	_, err := c.nc.Write(c.w.Buf)
	return err
}

// Reader is the buffered connection input, for a stream that follows a
// reply. The caller sets read deadlines with SetReadDeadline.
func (c *Client) Reader() *bufio.Reader { return c.br }

// SetReadDeadline sets the connection's read deadline.
func (c *Client) SetReadDeadline(t time.Time) error { return c.nc.SetReadDeadline(t) }

// RemoteAddr is the peer's address.
func (c *Client) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// Close closes the connection; it may be called from any goroutine to
// unblock a reader.
func (c *Client) Close() error { return c.nc.Close() }

// Reply kinds, by their RESP type byte.
const (
	KindSimple = '+'
	KindError  = '-'
	KindInt    = ':'
	KindBulk   = '$'
	KindArray  = '*'
)

// Reply is a RESP2 reply. Null bulk strings and arrays have Null set.
type Reply struct {
	Kind  byte
	Str   []byte // simple string, error or bulk
	Int   int64
	Null  bool
	Array []Reply
}

func (r Reply) String() string {
	switch r.Kind {
	case KindInt:
		return strconv.FormatInt(r.Int, 10)
	case KindArray:
		return fmt.Sprintf("%v", r.Array)
	}
	if r.Null {
		return "(nil)"
	}
	return string(r.Str)
}

// Limits on what ReadReply accepts from a peer.
const (
	MaxReplyBulk  = resp.DefaultMaxBulkLen
	MaxReplyArray = 1 << 20
	maxDepth      = 8
	maxLine       = 64 << 10
)

// ReadReply reads one RESP2 reply. Lengths are checked against the limits
// above and arrays grow as elements actually arrive, so a lying header
// costs an error or a wait, not an allocation of its claimed size.
func ReadReply(br *bufio.Reader) (Reply, error) { return readReply(br, 0) }

func readReply(br *bufio.Reader, depth int) (Reply, error) {
	line, err := readLine(br)
	if err != nil {
		return Reply{}, err
	}
	if len(line) == 0 {
		return Reply{}, fmt.Errorf("%w: empty line", ErrProtocol)
	}
	r := Reply{Kind: line[0]}
	switch r.Kind {
	case KindSimple, KindError:
		r.Str = append([]byte(nil), line[1:]...)
	case KindInt:
		if r.Int, err = strconv.ParseInt(string(line[1:]), 10, 64); err != nil {
			return Reply{}, fmt.Errorf("%w: bad integer %q", ErrProtocol, line[1:])
		}
	case KindBulk:
		n, err := strconv.ParseInt(string(line[1:]), 10, 64)
		switch {
		case err != nil || n < -1 || n > MaxReplyBulk:
			return Reply{}, fmt.Errorf("%w: bad bulk length %q", ErrProtocol, line[1:])
		case n == -1:
			r.Null = true
			return r, nil
		}
		r.Str, err = readBulk(br, int(n))
		if err != nil {
			return Reply{}, err
		}
	case KindArray:
		n, err := strconv.ParseInt(string(line[1:]), 10, 64)
		switch {
		case err != nil || n < -1 || n > MaxReplyArray:
			return Reply{}, fmt.Errorf("%w: bad array length %q", ErrProtocol, line[1:])
		case n == -1:
			r.Null = true
			return r, nil
		case depth >= maxDepth:
			return Reply{}, fmt.Errorf("%w: arrays nested too deep", ErrProtocol)
		}
		r.Array = make([]Reply, 0, min(n, 64))
		for range n {
			e, err := readReply(br, depth+1)
			if err != nil {
				return Reply{}, err
			}
			r.Array = append(r.Array, e)
		}
	default:
		return Reply{}, fmt.Errorf("%w: unexpected type byte %q", ErrProtocol, r.Kind)
	}
	return r, nil
}

// readLine returns a CRLF-terminated line without the CRLF; the slice is
// valid until the next read.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) || (err == nil && len(line) > maxLine) {
		return nil, fmt.Errorf("%w: line too long", ErrProtocol)
	}
	if err != nil {
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: line not ended by CRLF", ErrProtocol)
	}
	return line[:len(line)-2], nil
}

// readBulk reads n bytes and the CRLF after them, growing the buffer in
// chunks as data arrives.
func readBulk(br *bufio.Reader, n int) ([]byte, error) {
	const chunk = 1 << 20
	out := make([]byte, 0, min(n, chunk))
	for len(out) < n {
		k := min(n-len(out), chunk)
		start := len(out)
		out = append(out, make([]byte, k)...)
		if _, err := io.ReadFull(br, out[start:]); err != nil {
			return nil, err
		}
	}
	var crlf [2]byte
	if _, err := io.ReadFull(br, crlf[:]); err != nil {
		return nil, err
	}
	if crlf != [2]byte{'\r', '\n'} {
		return nil, fmt.Errorf("%w: bulk not ended by CRLF", ErrProtocol)
	}
	return out, nil
}
