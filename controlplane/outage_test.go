package controlplane_test

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/xdstest"
)

// tcpProxy forwards to target until cut, which closes the listener and
// every connection: the database "goes away" for this process only.
type tcpProxy struct {
	lis   net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{lis: lis}
	go func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

func (p *tcpProxy) cut() {
	p.lis.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// A Postgres outage does not take the control plane out of service: it
// stays ready, keeps serving its last snapshot to existing and new xDS
// clients (static stability), refuses writes, and says so in a metric.
func TestPostgresOutageKeepsServing(t *testing.T) {
	dbURL := testdeps.Postgres(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, u.Host)
	u.Host = proxy.lis.Addr().String()
	cp := start(t, u.String(), "127.0.0.1:0", "127.0.0.1:0")
	a := xdstest.StartBackend(t, "a")
	create(t, cp.addrs.Admin, "clusters", map[string]any{"name": "echo", "endpoints": []any{map[string]any{"address": "127.0.0.1", "port": a.Port}}})
	create(t, cp.addrs.Admin, "routes", map[string]any{"name": "echo", "match": map[string]any{"hosts": []string{"echo.grpc"}, "pathPrefix": "/"}, "cluster": "echo"})
	before := xdstest.Dial(t, cp.addrs.XDS, "grpc-before", "default", "echo.grpc")
	if got := xdstest.Reached(before); got != "a" {
		t.Fatalf("RPC reached %q, want a", got)
	}

	proxy.cut()
	metric := func() string {
		resp, err := http.Get("http://" + cp.addrs.Admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	xdstest.Eventually(t, 10*time.Second, "postgres_up 0", func() bool {
		return strings.Contains(metric(), "portico_controlplane_postgres_up 0")
	})
	resp, err := http.Get("http://" + cp.addrs.Admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz %d during a Postgres outage, want 200 (a snapshot is being served)", resp.StatusCode)
	}
	after := xdstest.Dial(t, cp.addrs.XDS, "grpc-after", "default", "echo.grpc")
	if got := xdstest.Reached(after); got != "a" {
		t.Fatalf("a client connecting during the outage reached %q, want a", got)
	}
	if got := xdstest.Reached(before); got != "a" {
		t.Fatalf("the existing client reached %q, want a", got)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+cp.addrs.Admin+"/admin/v1/clusters",
		strings.NewReader(`{"name":"more","endpoints":[{"address":"127.0.0.1","port":1}]}`))
	req.Header.Set("Idempotency-Key", "during-outage")
	req.Header.Set("Authorization", "Bearer "+cp.token)
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 500 {
		t.Fatalf("write during the outage: %d, want a 5xx", resp.StatusCode)
	}
}
