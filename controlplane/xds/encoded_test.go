package xds_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/portico-io/portico/controlplane/compile"
	"github.com/portico-io/portico/controlplane/nodes"
	"github.com/portico-io/portico/controlplane/spec"
	xdsserver "github.com/portico-io/portico/controlplane/xds"
	"github.com/portico-io/portico/internal/xdstest"
)

// encodedConfig is a config with something for every view: routes,
// listeners with a TLS secret, API keys, JWT, rate-limit rules. route names
// the cluster the route "r0" sends to, so versions can differ.
func encodedConfig(t *testing.T, version int64, route string) *compile.Snapshot {
	t.Helper()
	cfg := spec.NewConfig(version)
	for _, c := range []string{"echo", "other"} {
		cfg.Clusters[c] = &spec.Cluster{Name: c, Endpoints: []spec.Endpoint{{Address: "127.0.0.1", Port: 18900}}}
	}
	for i := range 20 {
		name := fmt.Sprintf("r%d", i)
		cluster := "echo"
		if i == 0 {
			cluster = route
		}
		r := &spec.Route{Name: name, Match: spec.RouteMatch{PathPrefix: "/" + name}, Cluster: cluster}
		if i%2 == 1 {
			r.Auth = &spec.RouteAuth{Mode: "apikey"}
		}
		cfg.Routes[name] = r
	}
	cfg.Secrets["gw"] = &spec.Secret{Name: "gw", Type: spec.SecretTLS, Files: &spec.SecretFiles{CertificateChain: "/etc/gw.crt", PrivateKey: "/etc/gw.key"}}
	cfg.Listeners["https"] = &spec.Listener{Name: "https", Port: 10443, TLS: &spec.ListenerTLS{Certificates: []string{"gw"}}}
	cfg.Consumers.Set("acme", &spec.Consumer{Name: "acme", Tenant: "acme"})
	for i := range 8 {
		cfg.APIKeys.Set(fmt.Sprintf("k%d", i), &spec.APIKey{Name: fmt.Sprintf("k%d", i), Consumer: "acme",
			SHA256: fmt.Sprintf("%02x%062x", i*31, i)})
	}
	cfg.RateLimitRules["rl"] = &spec.RateLimitRule{Name: "rl", Domain: "portico", Descriptors: []spec.RuleDescriptor{{Key: "consumer"}}, Limit: 5, Window: spec.Duration(time.Second)}
	snap, err := compile.Compile(cfg, compile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// encodedViews are the nodes of each view (claimed: no identity here) and
// the types each receives resources of.
var encodedViews = []struct {
	view compile.View
	node *corev3.Node
}{
	{compile.ViewGateway, &corev3.Node{Cluster: xdsserver.NodeClusterGateway, UserAgentName: "envoy"}},
	{compile.ViewRouting, &corev3.Node{Cluster: "apps"}},
	{compile.ViewExtAuthz, &corev3.Node{Cluster: xdsserver.NodeClusterExtAuthz}},
	{compile.ViewRateLimit, &corev3.Node{Cluster: xdsserver.NodeClusterRateLimit}},
}

// checkReceived checks that what a client received of typeURL is exactly
// want (a view of a compiled snapshot): every resource under the real type
// URL, decoding to a message proto.Equal to the compiled one, in the bytes
// the compiled message encodes to deterministically (what go-control-plane
// sent before resources were encoded once per snapshot).
func checkReceived(t *testing.T, what, typeURL string, got []*anypb.Any, names []string, want cache.ResourceSnapshot) {
	t.Helper()
	wantRes := want.GetResourcesAndTTL(typeURL)
	if len(got) != len(wantRes) {
		t.Fatalf("%s %s: %d resources, want %d", what, typeURL, len(got), len(wantRes))
	}
	for i, a := range got {
		if a.GetTypeUrl() != typeURL {
			t.Fatalf("%s: resource of type %q, want %q", what, a.GetTypeUrl(), typeURL)
		}
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatalf("%s %s: %v", what, typeURL, err)
		}
		name := cache.GetResourceName(m)
		if names != nil && names[i] != name {
			t.Fatalf("%s %s: resource %q named %q", what, typeURL, name, names[i])
		}
		w, ok := wantRes[name]
		if !ok {
			t.Fatalf("%s %s: unexpected resource %q", what, typeURL, name)
		}
		if !proto.Equal(m, w.Resource) {
			t.Fatalf("%s %s %q: received message differs from the compiled one", what, typeURL, name)
		}
		b, err := cache.MarshalResource(w.Resource)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.GetValue(), b) {
			t.Fatalf("%s %s %q: received bytes differ from the compiled message's encoding", what, typeURL, name)
		}
	}
}

// Every client receives, state of the world and delta, each resource in
// exactly the bytes of the compiled message, under its real type URL, at
// the snapshot's versions, though the cache is given encoded resources:
// the first response of a stream and, after the node ACKs, the next
// version's.
func TestXDSSendsTheCompiledBytes(t *testing.T) {
	v1 := encodedConfig(t, 1, "echo")
	v2 := encodedConfig(t, 2, "other")
	if compile.Equal(v1, v2) || sameVersions(v1, v2, compile.RouteType) {
		t.Fatal("v2 must change the routes")
	}
	for _, vc := range encodedViews {
		for _, typeURL := range compile.TypeURLs {
			if len(v1.View(vc.view).GetResourcesAndTTL(typeURL)) == 0 {
				continue
			}
			t.Run(fmt.Sprintf("view%d/%s", vc.view, typeURL[strings.LastIndexByte(typeURL, '/')+1:]), func(t *testing.T) {
				checkStreams(t, vc.node, vc.view, typeURL, v1, v2)
			})
		}
	}
}

func sameVersions(a, b *compile.Snapshot, typeURL string) bool {
	va, vb := a.GetVersionMap(typeURL), b.GetVersionMap(typeURL)
	if len(va) != len(vb) {
		return false
	}
	for k, v := range va {
		if vb[k] != v {
			return false
		}
	}
	return true
}

// checkStreams opens a state-of-the-world and a delta ADS stream for
// typeURL as node, checks what they receive of v1, ACKs, publishes v2 and
// checks what they receive of it.
func checkStreams(t *testing.T, node *corev3.Node, view compile.View, typeURL string, v1, v2 *compile.Snapshot) {
	tr := nodes.NewTracker()
	cp := startControlPlane(t, "127.0.0.1:0", tr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cp.srv.Publish(ctx, v1); err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(cp.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ads := discovery.NewAggregatedDiscoveryServiceClient(cc)
	sotw, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	delta, err := ads.DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	snode, dnode := proto.Clone(node).(*corev3.Node), proto.Clone(node).(*corev3.Node)
	snode.Id, dnode.Id = "sotw", "delta"
	if err := sotw.Send(&discovery.DiscoveryRequest{Node: snode, TypeUrl: typeURL}); err != nil {
		t.Fatal(err)
	}
	if err := delta.Send(&discovery.DeltaDiscoveryRequest{Node: dnode, TypeUrl: typeURL}); err != nil {
		t.Fatal(err)
	}
	// v2 changes the routes only: delta sends nothing else at v2.
	deltaAtV2 := !sameVersions(v1, v2, typeURL)
	for i, want := range []*compile.Snapshot{v1, v2} {
		wantView := want.View(view)
		resp, err := sotw.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetVersionInfo() != want.Version() || resp.GetTypeUrl() != typeURL {
			t.Fatalf("sotw: version %q of %q, want %q of %q", resp.GetVersionInfo(), resp.GetTypeUrl(), want.Version(), typeURL)
		}
		checkReceived(t, "sotw", typeURL, resp.GetResources(), nil, wantView)
		if err := sotw.Send(&discovery.DiscoveryRequest{Node: snode, TypeUrl: typeURL, VersionInfo: want.Version(), ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}

		if i == 0 || deltaAtV2 {
			dresp, err := delta.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if dresp.GetSystemVersionInfo() != want.Version() || dresp.GetTypeUrl() != typeURL {
				t.Fatalf("delta: version %q of %q, want %q of %q", dresp.GetSystemVersionInfo(), dresp.GetTypeUrl(), want.Version(), typeURL)
			}
			versions := wantView.GetVersionMap(typeURL)
			var anys []*anypb.Any
			var names []string
			for _, r := range dresp.GetResources() {
				if r.GetVersion() != versions[r.GetName()] {
					t.Fatalf("delta %q: version %q, want %q", r.GetName(), r.GetVersion(), versions[r.GetName()])
				}
				anys = append(anys, r.GetResource())
				names = append(names, r.GetName())
			}
			if i == 0 {
				checkReceived(t, "delta", typeURL, anys, names, wantView)
			} else if len(anys) == 0 {
				t.Fatal("delta: an empty response to a change")
			} else {
				for j, a := range anys {
					checkReceived(t, "delta", typeURL, []*anypb.Any{a}, names[j:j+1], only(wantView, typeURL, names[j]))
				}
			}
			if err := delta.Send(&discovery.DeltaDiscoveryRequest{Node: dnode, TypeUrl: typeURL, ResponseNonce: dresp.GetNonce()}); err != nil {
				t.Fatal(err)
			}
		}
		if i == 0 {
			xdstest.Eventually(t, 10*time.Second, "both nodes to ACK version 1", func() bool {
				return typeStatus(tr, "sotw", typeURL).AckedVersion == "1" && typeStatus(tr, "delta", typeURL).AckedVersion == "1"
			})
			if err := cp.srv.Publish(ctx, v2); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// only is snap's resource name of typeURL, alone.
func only(snap cache.ResourceSnapshot, typeURL, name string) cache.ResourceSnapshot {
	r, ok := snap.GetResourcesAndTTL(typeURL)[name]
	if !ok {
		return &single{typeURL: typeURL}
	}
	return &single{typeURL: typeURL, items: map[string]types.ResourceWithTTL{name: r}}
}

type single struct {
	cache.ResourceSnapshot
	typeURL string
	items   map[string]types.ResourceWithTTL
}

func (s *single) GetResourcesAndTTL(string) map[string]types.ResourceWithTTL { return s.items }
