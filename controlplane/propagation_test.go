package controlplane_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/portico-io/portico/internal/testdeps"
)

// adsClient is a minimal real ADS client: it subscribes to every cluster
// (wildcard CDS) and ACKs each response, recording when it ACKed which version.
type adsClient struct {
	mu    sync.Mutex
	acked map[string]time.Time
	ack   chan struct{} // signalled on every ACK
}

func runADSClient(ctx context.Context, t testing.TB, conn *grpc.ClientConn, id string) *adsClient {
	c := &adsClient{acked: map[string]time.Time{}, ack: make(chan struct{}, 1)}
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: id, Cluster: "portico-gateway"}
	if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			if err := stream.Send(&discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(),
				VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()}); err != nil {
				return
			}
			c.mu.Lock()
			c.acked[resp.GetVersionInfo()] = time.Now()
			c.mu.Unlock()
			select {
			case c.ack <- struct{}{}:
			default:
			}
		}
	}()
	return c
}

func (c *adsClient) ackedAt(version string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.acked[version]
	return at, ok
}

// propagate makes n changes through the admin API with clients connected and
// returns, per change, the time from the admin API's 2xx to the last ACK.
func propagate(t testing.TB, clients, changes int) []time.Duration {
	dbURL := testdeps.Postgres(t)
	cp := start(t, dbURL, "127.0.0.1:0", "127.0.0.1:0")
	create(t, cp.addrs.Admin, "clusters", map[string]any{"name": "svc", "endpoints": []any{map[string]any{"address": "127.0.0.1", "port": 20000}}})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A handful of connections carry the streams, as a fleet's Envoys would
	// spread over control-plane replicas; HTTP/2 multiplexes the rest.
	conns := make([]*grpc.ClientConn, 8)
	for i := range conns {
		cc, err := grpc.NewClient(cp.addrs.XDS, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		conns[i] = cc
	}
	fleet := make([]*adsClient, clients)
	for i := range fleet {
		fleet[i] = runADSClient(ctx, t, conns[i%len(conns)], fmt.Sprintf("gw-%03d", i))
	}
	var lat []time.Duration
	for i := range changes {
		url := "http://" + cp.addrs.Admin + "/admin/v1/clusters/svc"
		_, h := call(t, http.MethodGet, url, nil, nil, nil)
		body := map[string]any{"endpoints": []any{map[string]any{"address": "127.0.0.1", "port": 20001 + i}}}
		code, h := call(t, http.MethodPatch, url, body, map[string]string{"If-Match": h.Get("ETag")}, nil)
		acceptedAt := time.Now()
		if code != http.StatusOK {
			t.Fatalf("PATCH: %d", code)
		}
		v := h.Get("X-Portico-Config-Version")
		if _, err := strconv.Atoi(v); err != nil {
			t.Fatalf("no config version header: %q", v)
		}
		var last time.Time
		deadline := time.Now().Add(30 * time.Second)
		for _, c := range fleet {
			for {
				at, ok := c.ackedAt(v)
				if ok {
					if at.After(last) {
						last = at
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("change %d (version %s): not ACKed by every client after 30s", i, v)
				}
				select {
				case <-c.ack:
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
		lat = append(lat, max(last.Sub(acceptedAt), 0))
	}
	return lat
}

// Every one of 200 ADS clients ACKs every change (correctness; the timing
// is reported by BenchmarkPropagation).
func TestPropagation200Clients(t *testing.T) {
	if lat := propagate(t, 200, 3); len(lat) != 3 {
		t.Fatalf("%d changes measured", len(lat))
	}
}

// BenchmarkPropagation reports the time from the admin API's 2xx to the last
// of 200 ADS clients' ACKs, over 30 changes (target: p99 < 1s).
func BenchmarkPropagation(b *testing.B) {
	for b.Loop() {
		lat := propagate(b, 200, 30)
		slices.Sort(lat)
		p := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
		b.ReportMetric(p(0.5), "p50-ms")
		b.ReportMetric(p(0.99), "p99-ms")
		b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	}
}
