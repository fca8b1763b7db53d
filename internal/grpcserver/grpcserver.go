// Package grpcserver builds gRPC servers with the standard health service
// and keepalive settings, and serves them for the life of a context with a
// bounded graceful stop.
package grpcserver

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

// Server is a grpc.Server plus its health service.
type Server struct {
	*grpc.Server
	Health *health.Server
}

// New returns a server with health registered (overall status SERVING; set
// per-service status through Health). Extra options are appended.
func New(opts ...grpc.ServerOption) *Server {
	base := []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		// Clients (Envoy, grpc-go xDS) ping every 30s or less; allow it.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	s := grpc.NewServer(append(base, opts...)...)
	h := health.NewServer()
	healthpb.RegisterHealthServer(s, h)
	return &Server{Server: s, Health: h}
}

// Serve serves on lis until ctx is done. On shutdown it marks health
// NOT_SERVING, then stops gracefully, forcing a stop after timeout (default
// 5s; long-lived xDS streams would otherwise hold GracefulStop forever).
func (s *Server) Serve(ctx context.Context, lis net.Listener, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Server.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("grpcserver: %w", err)
	case <-ctx.Done():
	}
	s.Health.Shutdown()
	done := make(chan struct{})
	go func() { s.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		s.Stop()
	}
	<-errc
	return nil
}
