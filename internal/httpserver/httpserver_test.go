package httpserver_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/httpserver"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/tlstest"
)

// TestTLSAPIPort serves an API port the way the components do
// (APIServerConfig): any TLS client is served, and a client certificate,
// when presented, must be a valid one of the trust domain and becomes the
// request's identity. A plaintext request gets no answer from the API.
func TestTLSAPIPort(t *testing.T) {
	p := tlstest.New(t)
	files := p.Load(t, identity.ControlPlane, "cp")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- httpserver.Serve(ctx, lis, httpserver.Config{
			TLS: files.APIServerConfig("h2", "http/1.1"),
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				id, err := identity.FromRequest(r)
				if err != nil {
					io.WriteString(w, "anonymous "+r.Proto)
					return
				}
				io.WriteString(w, id.String()+" "+r.Proto)
			}),
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	url := "https://localhost:" + strconv.Itoa(lis.Addr().(*net.TCPAddr).Port)

	// Plaintext: the server answers 400 (not the API) and closes.
	if resp, err := http.Get(strings.Replace(url, "https", "http", 1) + "/"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(b), "anonymous") {
			t.Fatalf("plaintext request: %d %q", resp.StatusCode, b)
		}
	}

	want := map[string]string{ // case name -> body prefix; "" = refused
		"no client certificate": "anonymous HTTP/2.0",
		"another CA":            "",
		"expired":               "",
		"wrong role worker":     "spiffe://portico.local/worker/test-client HTTP/2.0",
		"role operator":         "spiffe://portico.local/operator/test-client HTTP/2.0",
	}
	for _, c := range p.Cases(t, identity.Operator, identity.Worker) {
		t.Run(c.Name, func(t *testing.T) {
			hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: c.Client, ForceAttemptHTTP2: true}}
			resp, err := hc.Get(url + "/")
			exp, ok := want[c.Name]
			if !ok {
				t.Fatalf("no expectation for case %q", c.Name)
			}
			if exp == "" {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("served (%d), want a refused handshake", resp.StatusCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if string(b) != exp {
				t.Fatalf("body %q, want %q", b, exp)
			}
		})
	}
}
