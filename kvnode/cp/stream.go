package cp

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlsfiles"
)

// errPartitioned is what a partitioned node's Raft dials and accepts fail
// with.
var errPartitioned = errors.New("cp: raft transport partitioned (fault drill)")

// stream is Raft's TCP stream layer with fault-drill switches: while
// partitioned, every Raft connection of this node is closed and new ones
// are refused in both directions, as if its network were cut; while
// stalled, connections stay open but nothing read is handed to Raft and
// nothing is written until resumed, as if the process were stopped. It is
// plain TCP otherwise, or mutual TLS between kvnode identities when given a
// certificate.
type stream struct {
	net.Listener
	advertise net.Addr
	// dialTLS is the client side of mutual TLS; nil dials plain TCP.
	dialTLS *tls.Config

	mu          sync.Mutex
	partitioned bool
	conns       map[net.Conn]struct{}
	// resumed is nil when not stalled; otherwise closed on resume.
	resumed chan struct{}
}

// stall stops (true) or resumes (false) this node's Raft I/O.
func (s *stream) stall(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case on && s.resumed == nil:
		s.resumed = make(chan struct{})
	case !on && s.resumed != nil:
		close(s.resumed)
		s.resumed = nil
	}
}

func (s *stream) waitResumed() {
	s.mu.Lock()
	ch := s.resumed
	s.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

var _ raft.StreamLayer = (*stream)(nil)

// raftPeers admits kvnode identities only.
var raftPeers = identity.Policy{Roles: []identity.Role{identity.KVNode}}

func newStream(ctx context.Context, bind string, advertise net.Addr, files *tlsfiles.Files) (*stream, error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", bind)
	if err != nil {
		return nil, err
	}
	if advertise == nil {
		advertise = l.Addr()
	}
	s := &stream{Listener: l, advertise: advertise, conns: map[net.Conn]struct{}{}}
	if files != nil {
		// Accepted connections complete the handshake on their first read,
		// on Raft's goroutine for that connection, so a slow or refused
		// peer holds up no one else.
		s.Listener = tls.NewListener(l, files.ServerConfig(raftPeers))
		s.dialTLS = files.ClientConfig(raftPeers)
	}
	return s, nil
}

// Addr is the advertised address (raft.NetworkTransport uses it as the
// node's own address).
func (s *stream) Addr() net.Addr { return s.advertise }

func (s *stream) track(c net.Conn) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.partitioned {
		_ = c.Close()
		return nil, errPartitioned
	}
	tc := &trackedConn{Conn: c, s: s}
	s.conns[tc] = struct{}{}
	return tc, nil
}

// Dial opens a Raft connection to a peer.
func (s *stream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	s.mu.Lock()
	p := s.partitioned
	s.mu.Unlock()
	if p {
		return nil, errPartitioned
	}
	d := &net.Dialer{Timeout: timeout}
	var c net.Conn
	var err error
	if s.dialTLS != nil {
		// raft.StreamLayer's Dial carries no context: the dial and the
		// handshake are bounded by d.Timeout, as with tls.DialWithDialer.
		c, err = (&tls.Dialer{NetDialer: d, Config: s.dialTLS}).DialContext(context.Background(), "tcp", string(address))
	} else {
		c, err = d.Dial("tcp", string(address))
	}
	if err != nil {
		return nil, err
	}
	return s.track(c)
}

// Accept returns the next peer connection, dropping those that arrive
// while partitioned.
func (s *stream) Accept() (net.Conn, error) {
	for {
		c, err := s.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc, err := s.track(c); err == nil {
			return tc, nil
		}
	}
}

// partition cuts (true) or heals (false) this node's Raft network.
func (s *stream) partition(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.partitioned = on
	if on {
		for c := range s.conns {
			_ = c.(*trackedConn).Conn.Close()
			delete(s.conns, c)
		}
	}
}

type trackedConn struct {
	net.Conn
	s *stream
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.s.waitResumed()
	return n, err
}

func (c *trackedConn) Write(p []byte) (int, error) {
	c.s.waitResumed()
	return c.Conn.Write(p)
}

func (c *trackedConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
	return c.Conn.Close()
}
