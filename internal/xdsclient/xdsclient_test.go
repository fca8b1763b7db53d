package xdsclient_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/portico-io/portico/internal/xdsclient"
)

const typeA, typeB = "type.googleapis.com/test.A", "type.googleapis.com/test.B"

// fakeADS hands each stream to the test: requests arrive on reqs, and the
// test sends responses on resps; closing a stream is a send on hangup.
type fakeADS struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
	reqs   chan *discovery.DiscoveryRequest
	resps  chan *discovery.DiscoveryResponse
	hangup chan struct{}
}

func (f *fakeADS) StreamAggregatedResources(s discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	errc := make(chan error, 1)
	go func() {
		for {
			r, err := s.Recv()
			if err != nil {
				errc <- err
				return
			}
			f.reqs <- r
		}
	}()
	for {
		select {
		case r := <-f.resps:
			if err := s.Send(r); err != nil {
				return err
			}
		case <-f.hangup:
			return errors.New("hangup")
		case err := <-errc:
			return err
		}
	}
}

func recv(t *testing.T, ch chan *discovery.DiscoveryRequest) *discovery.DiscoveryRequest {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no request from the client")
		return nil
	}
}

func TestAckNackReconnect(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeADS{reqs: make(chan *discovery.DiscoveryRequest, 16), resps: make(chan *discovery.DiscoveryResponse), hangup: make(chan struct{})}
	g := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(g, f)
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()

	applied := make(chan string, 16)
	apply := func(typeURL, version string, res []*anypb.Any) error {
		if version == "bad" {
			return errors.New(`policy: JwtProvider "x": inline_jwks: broken`)
		}
		applied <- typeURL + "@" + version
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- xdsclient.Run(ctx, xdsclient.Config{Addr: lis.Addr().String(), Node: &corev3.Node{Id: "n1", Cluster: "portico-extauthz"},
			Types: []string{typeA, typeB}, Apply: apply, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
			InsecurePlaintext: true, Protocol: xdsclient.ProtocolSotW})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	for _, want := range []string{typeA, typeB} {
		r := recv(t, f.reqs)
		if r.GetTypeUrl() != want || r.GetVersionInfo() != "" || len(r.GetResourceNames()) != 0 || r.GetNode().GetCluster() != "portico-extauthz" {
			t.Fatalf("initial request %v", r)
		}
	}
	f.resps <- &discovery.DiscoveryResponse{TypeUrl: typeA, VersionInfo: "1", Nonce: "n1"}
	if r := recv(t, f.reqs); r.GetVersionInfo() != "1" || r.GetResponseNonce() != "n1" || r.GetErrorDetail() != nil {
		t.Fatalf("ACK %v", r)
	}
	if a := <-applied; a != typeA+"@1" {
		t.Fatalf("applied %s", a)
	}
	f.resps <- &discovery.DiscoveryResponse{TypeUrl: typeA, VersionInfo: "bad", Nonce: "n2"}
	r := recv(t, f.reqs)
	if r.GetVersionInfo() != "1" || r.GetResponseNonce() != "n2" || !strings.Contains(r.GetErrorDetail().GetMessage(), "inline_jwks") {
		t.Fatalf("NACK %v", r)
	}
	// The server drops the stream: the client comes back reporting what it holds.
	f.hangup <- struct{}{}
	got := map[string]string{}
	for range 2 {
		r := recv(t, f.reqs)
		got[r.GetTypeUrl()] = r.GetVersionInfo()
	}
	if got[typeA] != "1" || got[typeB] != "" {
		t.Fatalf("resubscription versions %v", got)
	}
}

// startFake serves a fakeADS on loopback until the test ends.
func startFake(t *testing.T) (*fakeADS, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeADS{reqs: make(chan *discovery.DiscoveryRequest, 16), resps: make(chan *discovery.DiscoveryResponse), hangup: make(chan struct{})}
	g := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(g, f)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return f, lis.Addr().String()
}

// runClient runs the client until the test ends.
func runClient(t *testing.T, cfg xdsclient.Config) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- xdsclient.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// bigResponse is a response of about n bytes.
func bigResponse(version string, n int) *discovery.DiscoveryResponse {
	return &discovery.DiscoveryResponse{TypeUrl: typeA, VersionInfo: version, Nonce: "n-" + version,
		Resources: []*anypb.Any{{TypeUrl: typeA, Value: make([]byte, n)}}}
}

func TestReceiveLimit(t *testing.T) {
	// The default takes a response past gRPC's own 4 MiB.
	f, addr := startFake(t)
	applied := make(chan int, 4)
	runClient(t, xdsclient.Config{Addr: addr, Types: []string{typeA}, InsecurePlaintext: true, Protocol: xdsclient.ProtocolSotW,
		Apply: func(_, _ string, res []*anypb.Any) error { applied <- len(res[0].GetValue()); return nil }})
	recv(t, f.reqs)
	f.resps <- bigResponse("1", 6<<20)
	if r := recv(t, f.reqs); r.GetVersionInfo() != "1" || r.GetErrorDetail() != nil {
		t.Fatalf("ACK %v", r)
	}
	if n := <-applied; n != 6<<20 {
		t.Fatalf("applied %d bytes", n)
	}

	// A smaller configured limit refuses it: the stream fails, nothing is
	// applied, and the client resubscribes with what it holds.
	f2, addr2 := startFake(t)
	runClient(t, xdsclient.Config{Addr: addr2, Types: []string{typeA}, InsecurePlaintext: true, MaxRecvMsgBytes: 1 << 20, Protocol: xdsclient.ProtocolSotW,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		Apply: func(_, _ string, res []*anypb.Any) error { t.Error("applied a response over the limit"); return nil }})
	recv(t, f2.reqs)
	f2.resps <- bigResponse("1", 2<<20)
	if r := recv(t, f2.reqs); r.GetResponseNonce() != "" || r.GetVersionInfo() != "" {
		t.Fatalf("after an oversized response: %v, want a fresh subscription", r)
	}
}

func TestHealthFollowsTheStream(t *testing.T) {
	f, addr := startFake(t)
	h := xdsclient.NewHealth()
	h.SyncGrace = time.Hour // in sync only by an applied response
	runClient(t, xdsclient.Config{Addr: addr, Types: []string{typeA}, InsecurePlaintext: true, MaxRecvMsgBytes: 1 << 20, Protocol: xdsclient.ProtocolSotW,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Health: h,
		Apply: func(string, string, []*anypb.Any) error { return nil }})
	recv(t, f.reqs)
	f.resps <- bigResponse("1", 1000)
	recv(t, f.reqs)
	if err := h.Check(context.Background()); err != nil {
		t.Fatalf("after an ACK: %v", err)
	}
	// An oversized response: readiness fails at once, naming it.
	f.resps <- bigResponse("2", 2<<20)
	recv(t, f.reqs) // the resubscription
	err := h.Check(context.Background())
	if !errors.Is(err, xdsclient.ErrStale) || !strings.Contains(err.Error(), "larger than max") {
		t.Fatalf("after an oversized response: %v", err)
	}
	f.resps <- bigResponse("3", 1000)
	recv(t, f.reqs)
	if err := h.Check(context.Background()); err != nil {
		t.Fatalf("after a response fits again: %v", err)
	}
}
