package failover

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

// Pinger is the default liveness probe: a RESP PING on a connection kept
// per address (so probing every peer every interval costs no connection
// setup and leaves no TIME_WAIT sockets), redialed once when a kept
// connection fails (the peer restarted). Any reply line counts as alive:
// +PONG, but also -LOADING, -NOAUTH or any other error, because the
// process answered.
type Pinger struct {
	// TLS, when set, is the peers' RESP over TLS (nodes with certificate
	// files): a node passes tlsfiles.Files.ClientConfig admitting
	// cachenode. A failed handshake is a failed probe.
	TLS *tls.Config

	mu    sync.Mutex
	conns map[string]*pingConn
}

type pingConn struct {
	mu sync.Mutex
	c  net.Conn
	r  *bufio.Reader
}

var ping = []byte("*1\r\n$4\r\nPING\r\n")

// Probe pings addr within ctx (its deadline bounds the dial, the write and
// the read; without one, 1 s).
func (p *Pinger) Probe(ctx context.Context, addr string) error {
	p.mu.Lock()
	if p.conns == nil {
		p.conns = map[string]*pingConn{}
	}
	pc := p.conns[addr]
	if pc == nil {
		pc = &pingConn{}
		p.conns[addr] = pc
	}
	p.mu.Unlock()

	pc.mu.Lock()
	defer pc.mu.Unlock()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Second)
	}
	reused := pc.c != nil
	err := pc.once(ctx, addr, deadline, p.TLS)
	if err != nil && reused && ctx.Err() == nil && time.Now().Before(deadline) {
		// A kept connection can be one the peer closed when it restarted.
		err = pc.once(ctx, addr, deadline, p.TLS)
	}
	return err
}

func (pc *pingConn) once(ctx context.Context, addr string, deadline time.Time, tc *tls.Config) error {
	if pc.c == nil {
		d := &net.Dialer{Deadline: deadline}
		var c net.Conn
		var err error
		if tc != nil {
			// The handshake is bounded by the deadline too: a frozen peer
			// accepts (the kernel does) but never answers it.
			c, err = (&tls.Dialer{NetDialer: d, Config: tc}).DialContext(ctx, "tcp", addr)
		} else {
			c, err = d.DialContext(ctx, "tcp", addr)
		}
		if err != nil {
			return err
		}
		pc.c, pc.r = c, bufio.NewReaderSize(c, 256)
	}
	fail := func(err error) error {
		pc.c.Close()
		pc.c, pc.r = nil, nil
		return err
	}
	if err := pc.c.SetDeadline(deadline); err != nil {
		return fail(err)
	}
	if _, err := pc.c.Write(ping); err != nil {
		return fail(err)
	}
	line, err := pc.r.ReadSlice('\n')
	if err != nil {
		return fail(err)
	}
	if len(line) < 3 {
		return fail(errors.New("failover: malformed reply to PING"))
	}
	switch line[0] {
	case '+', '-', '$', '*', ':', '%', '>', '_', '#', ',', '(', '=', '|', '~', '!':
	default:
		return fail(errors.New("failover: not a RESP reply to PING"))
	}
	if pc.r.Buffered() > 0 { // more than one line (a push): start clean next time
		_ = fail(nil)
	}
	return nil
}

// Close closes the kept connections.
func (p *Pinger) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pc := range p.conns {
		pc.mu.Lock()
		if pc.c != nil {
			pc.c.Close()
			pc.c, pc.r = nil, nil
		}
		pc.mu.Unlock()
	}
}
