// Package internode is kvnode's node-to-node gRPC protocol: replica reads
// and writes, hint replay, gossip, Merkle trees and range streaming, all on
// the one internode port. Messages and service are generated from
// proto/portico/kv/v1/kv.proto (`make proto`).
package internode

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// ServiceName is the fully qualified gRPC service name.
const ServiceName = "portico.kv.v1.Internode"

// Handler is what a node serves to its peers.
type Handler interface {
	Apply(context.Context, *kvv1.ApplyRequest) (*kvv1.ApplyResponse, error)
	Read(context.Context, *kvv1.ReadRequest) (*kvv1.ReadResponse, error)
	Gossip(context.Context, *kvv1.GossipRequest) (*kvv1.GossipResponse, error)
	Tree(context.Context, *kvv1.TreeRequest) (*kvv1.TreeResponse, error)
	Scan(context.Context, *kvv1.ScanRequest) (*kvv1.ScanResponse, error)
	Rebalance(context.Context, *kvv1.RebalanceRequest) (*kvv1.RebalanceResponse, error)
}

// Register adds the internode service backed by h to s.
func Register(s *grpc.Server, h Handler) {
	kvv1.RegisterInternodeServer(s, server{h: h})
}

// server adapts Handler to the generated service interface.
type server struct {
	kvv1.UnimplementedInternodeServer
	h Handler
}

func (s server) Apply(ctx context.Context, in *kvv1.ApplyRequest) (*kvv1.ApplyResponse, error) {
	return s.h.Apply(ctx, in)
}

func (s server) Read(ctx context.Context, in *kvv1.ReadRequest) (*kvv1.ReadResponse, error) {
	return s.h.Read(ctx, in)
}

func (s server) Gossip(ctx context.Context, in *kvv1.GossipRequest) (*kvv1.GossipResponse, error) {
	return s.h.Gossip(ctx, in)
}

func (s server) Tree(ctx context.Context, in *kvv1.TreeRequest) (*kvv1.TreeResponse, error) {
	return s.h.Tree(ctx, in)
}

func (s server) Scan(ctx context.Context, in *kvv1.ScanRequest) (*kvv1.ScanResponse, error) {
	return s.h.Scan(ctx, in)
}

func (s server) Rebalance(ctx context.Context, in *kvv1.RebalanceRequest) (*kvv1.RebalanceResponse, error) {
	return s.h.Rebalance(ctx, in)
}

// Client dials peers lazily and keeps one connection per address. It is
// safe for concurrent use.
type Client struct {
	creds credentials.TransportCredentials
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewClient returns a client with no connections yet that dials with creds
// (nil: plaintext).
func NewClient(creds credentials.TransportCredentials) *Client {
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	return &Client{creds: creds, conns: map[string]*grpc.ClientConn{}}
}

func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(c.creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)),
		grpc.WithConnectParams(grpcConnectParams),
	)
	if err != nil {
		return nil, fmt.Errorf("internode: dial %s: %w", addr, err)
	}
	c.conns[addr] = cc
	return cc, nil
}

// Close closes every connection.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for a, cc := range c.conns {
		_ = cc.Close()
		delete(c.conns, a)
	}
}

func invoke[Resp any, PResp interface {
	*Resp
	proto.Message
}](ctx context.Context, c *Client, addr, name string, in proto.Message, opts ...grpc.CallOption) (PResp, error) {
	cc, err := c.conn(addr)
	if err != nil {
		return nil, err
	}
	out := PResp(new(Resp))
	if err := cc.Invoke(ctx, "/"+ServiceName+"/"+name, in, out, opts...); err != nil {
		return nil, err
	}
	return out, nil
}

// Apply sends replica writes. Like every call but Gossip, it is only sent
// to peers believed up, so it waits (within ctx) for a connection that is
// reconnecting (a peer that just restarted) rather than failing at once;
// a peer that is really gone costs the deadline, after which the caller
// hints or reads elsewhere.
func (c *Client) Apply(ctx context.Context, addr string, in *kvv1.ApplyRequest) (*kvv1.ApplyResponse, error) {
	return invoke[kvv1.ApplyResponse](ctx, c, addr, "Apply", in, grpc.WaitForReady(true))
}

// Read reads one key (or its digest) from a replica.
func (c *Client) Read(ctx context.Context, addr string, in *kvv1.ReadRequest) (*kvv1.ReadResponse, error) {
	return invoke[kvv1.ReadResponse](ctx, c, addr, "Read", in, grpc.WaitForReady(true))
}

// Gossip exchanges membership views.
func (c *Client) Gossip(ctx context.Context, addr string, in *kvv1.GossipRequest) (*kvv1.GossipResponse, error) {
	return invoke[kvv1.GossipResponse](ctx, c, addr, "Gossip", in)
}

// Tree fetches a replica's Merkle trees.
func (c *Client) Tree(ctx context.Context, addr string, in *kvv1.TreeRequest) (*kvv1.TreeResponse, error) {
	return invoke[kvv1.TreeResponse](ctx, c, addr, "Tree", in, grpc.WaitForReady(true))
}

// Scan streams one page of a replica's range.
func (c *Client) Scan(ctx context.Context, addr string, in *kvv1.ScanRequest) (*kvv1.ScanResponse, error) {
	return invoke[kvv1.ScanResponse](ctx, c, addr, "Scan", in, grpc.WaitForReady(true))
}

// Rebalance asks a node to pull the ranges it gains.
func (c *Client) Rebalance(ctx context.Context, addr string, in *kvv1.RebalanceRequest) (*kvv1.RebalanceResponse, error) {
	return invoke[kvv1.RebalanceResponse](ctx, c, addr, "Rebalance", in, grpc.WaitForReady(true))
}

// Pause makes a server stop responding while paused: every call blocks
// until resumed or until its deadline. It models a stalled process (GC
// pause, SIGSTOP) for fault tests and operators' drills.
type Pause struct {
	mu     sync.Mutex
	resume chan struct{} // nil when running
}

// Set pauses (true) or resumes (false).
func (p *Pause) Set(paused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case paused && p.resume == nil:
		p.resume = make(chan struct{})
	case !paused && p.resume != nil:
		close(p.resume)
		p.resume = nil
	}
}

// Wait blocks while paused; it returns ctx's error if ctx ends first.
func (p *Pause) Wait(ctx context.Context) error {
	p.mu.Lock()
	ch := p.resume
	p.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Interceptor blocks calls while p is paused.
func (p *Pause) Interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := p.Wait(ctx); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

// grpcConnectParams keeps reconnect backoff short: a restarted peer must be
// reachable again within a gossip round or two.
var grpcConnectParams = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 2 * time.Second,
}
