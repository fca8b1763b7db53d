// Package xdstest holds helpers for tests that drive real xDS clients: a
// gRPC backend that answers with its id, a proxyless grpc-go client with a
// bootstrap of its own, and polling with a deadline.
package xdstest

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/xds"

	"github.com/portico-io/portico/internal/eventually"
	"github.com/portico-io/portico/internal/xdscontract"
)

// Backend is a gRPC TestService whose UnaryCall answers with its ID.
type Backend struct {
	testgrpc.UnimplementedTestServiceServer
	ID   string
	Addr string
	Port int
}

// UnaryCall reports the backend's id.
func (b *Backend) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{ServerId: b.ID}, nil
}

// StartBackend serves a Backend on a loopback port until the test ends.
func StartBackend(t testing.TB, id string) *Backend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &Backend{ID: id, Addr: lis.Addr().String(), Port: lis.Addr().(*net.TCPAddr).Port}
	s := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(s, b)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return b
}

// Dial opens a proxyless grpc-go channel to xds:///target whose xDS client
// talks to xdsAddr as node nodeID (cluster portico-gateway, metadata
// portico.group = group). Each call has its own bootstrap and xDS client.
func Dial(t testing.TB, xdsAddr, nodeID, group, target string) testgrpc.TestServiceClient {
	t.Helper()
	bootstrap := fmt.Sprintf(`{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": %q, "cluster": %q, "metadata": {%q: %q}}
	}`, xdsAddr, nodeID, xdscontract.NodeClusterGateway, xdscontract.GroupMetadataKey, group)
	rb, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("xds:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(rb))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

// Reached makes one RPC (waiting up to 5s for the channel) and returns the
// id of the backend that answered, or "error: ..." .
func Reached(c testgrpc.TestServiceClient) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return "error: " + err.Error()
	}
	return resp.GetServerId()
}

// Eventually polls cond until it holds, failing the test after d
// (eventually.True; kept here for the xDS tests that call it).
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	eventually.True(t, d, what, cond)
}

// Consistently fails the test the first time cond does not hold within d
// (eventually.Always): for "nothing happens" checks, such as a NACKed
// version not being re-sent.
func Consistently(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	eventually.Always(t, d, what, cond)
}
