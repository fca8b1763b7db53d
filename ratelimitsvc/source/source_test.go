package source_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/portico-io/portico/internal/xdsclient"
	ratelimitv1 "github.com/portico-io/portico/proto/portico/ratelimit/v1"
	"github.com/portico-io/portico/ratelimitsvc/rules"
	"github.com/portico-io/portico/ratelimitsvc/source"
)

// adsServer sends the scripted responses in order and reports every
// request (ACK/NACK) it receives after the first.
type adsServer struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer
	responses []*discovery.DiscoveryResponse
	acks      chan *discovery.DiscoveryRequest
}

func (a *adsServer) StreamAggregatedResources(s discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	if _, err := s.Recv(); err != nil { // subscription
		return err
	}
	for _, r := range a.responses {
		if err := s.Send(r); err != nil {
			return err
		}
		req, err := s.Recv()
		if err != nil {
			return err
		}
		a.acks <- req
	}
	<-s.Context().Done()
	return nil
}

func serve(t *testing.T, a *adsServer) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(g, a)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

func ruleAny(t *testing.T, name string, limit uint32) *anypb.Any {
	a, err := anypb.New(&ratelimitv1.RateLimitRule{Name: name, Domain: "d", Limit: limit, Window: durationpb.New(time.Second),
		Descriptors: []*ratelimitv1.Descriptor{{Key: "k"}}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func recv(t *testing.T, c chan *discovery.DiscoveryRequest) *discovery.DiscoveryRequest {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no ACK/NACK within 10s")
		return nil
	}
}

// Good versions are ACKed and persisted; a bad one (invalid rule, foreign
// resource type) is NACKed with the reason and the last good rules stay;
// the state dir restores them in a new process.
func TestADSAckNackPersist(t *testing.T) {
	wrong, _ := anypb.New(wrapperspb.String("x"))
	wrong.TypeUrl = source.RuleType // right URL, wrong bytes
	srv := &adsServer{acks: make(chan *discovery.DiscoveryRequest, 8), responses: []*discovery.DiscoveryResponse{
		{VersionInfo: "v1", Nonce: "n1", TypeUrl: source.RuleType, Resources: []*anypb.Any{ruleAny(t, "a", 5)}},
		{VersionInfo: "v2", Nonce: "n2", TypeUrl: source.RuleType, Resources: []*anypb.Any{ruleAny(t, "a", 0)}},
		{VersionInfo: "v3", Nonce: "n3", TypeUrl: source.RuleType, Resources: []*anypb.Any{wrong}},
		{VersionInfo: "v4", Nonce: "n4", TypeUrl: source.RuleType, Resources: []*anypb.Any{ruleAny(t, "a", 7), ruleAny(t, "b", 1)}},
	}}
	addr := serve(t, srv)
	state := t.TempDir()
	live := rules.NewLive()
	ctx, cancel := context.WithCancel(context.Background())
	// What was in force right after each response, before its ACK/NACK
	// lets the server send the next one.
	inForce := make(chan string, 8)
	// The scripted server speaks state of the world only.
	ads := &source.ADS{Addr: addr, NodeID: "n", StateDir: state, Sink: live, InsecurePlaintext: true, Protocol: xdsclient.ProtocolSotW, OnResponse: func(string, error) {
		tab := live.Load()
		inForce <- fmt.Sprintf("%s/%d", tab.Versions[rules.SourceXDS], len(tab.Rules()))
	}}
	done := make(chan error, 1)
	go func() { done <- ads.Run(ctx) }()
	defer func() { cancel(); <-done }()

	if r := recv(t, srv.acks); r.GetVersionInfo() != "v1" || r.GetResponseNonce() != "n1" || r.GetErrorDetail() != nil {
		t.Fatalf("v1: %v", r)
	}
	for _, want := range []struct{ nonce, msg string }{{"n2", "limit must be greater than 0"}, {"n3", "invalid"}} {
		r := recv(t, srv.acks)
		if r.GetVersionInfo() != "v1" || r.GetResponseNonce() != want.nonce || !strings.Contains(r.GetErrorDetail().GetMessage(), want.msg) {
			t.Fatalf("NACK %s: %v", want.nonce, r)
		}
	}
	for i, want := range []string{"v1/1", "v1/1", "v1/1", "v4/2"} {
		if got := <-inForce; got != want {
			t.Fatalf("after response %d: %s in force, want %s", i+1, got, want)
		}
	}
	if r := recv(t, srv.acks); r.GetVersionInfo() != "v4" || r.GetErrorDetail() != nil {
		t.Fatalf("v4: %v", r)
	}

	// A new process, control plane unreachable: rules come from disk.
	again := rules.NewLive()
	ok, err := (&source.ADS{StateDir: state, Sink: again}).LoadState()
	if !ok || err != nil || again.Load().Versions[rules.SourceXDS] != "v4" || len(again.Load().Rules()) != 2 {
		t.Fatalf("LoadState: %v %v %v", ok, err, again.Load().Versions)
	}
	// Another type's state is not mistaken for ours; garbage is an error.
	if ok, err := (&source.ADS{StateDir: state, Sink: rules.NewLive(), TypeURL: source.ConfigType}).LoadState(); ok || err == nil {
		t.Fatalf("foreign type loaded: %v %v", ok, err)
	}
	if err := os.WriteFile(filepath.Join(state, "ratelimit-rules.pb"), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, err := (&source.ADS{StateDir: state, Sink: rules.NewLive()}).LoadState(); ok || err == nil {
		t.Fatalf("garbage loaded: %v %v", ok, err)
	}
	if ok, err := (&source.ADS{StateDir: t.TempDir(), Sink: rules.NewLive()}).LoadState(); ok || err != nil {
		t.Fatalf("empty state dir: %v %v", ok, err)
	}
}

func TestFileSourceKeepsRulesOnBadEdit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.yaml")
	if err := os.WriteFile(path, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 3}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	live := rules.NewLive()
	f := &source.File{Dir: dir, Sink: live}
	if err := f.Load(); err != nil {
		t.Fatal(err)
	}
	v1 := live.Load().Versions[rules.SourceFile]
	if err := os.WriteFile(path, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 3}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := f.Load(); !errors.Is(err, rules.ErrInvalid) {
		t.Fatalf("bad edit: %v", err)
	}
	if tab := live.Load(); tab.Versions[rules.SourceFile] != v1 || tab.Rules()[0].Limit != 3 {
		t.Fatal("bad edit replaced the rules")
	}
}
