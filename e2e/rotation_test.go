package e2e_test

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	"github.com/portico-io/portico/controlplane"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/pki"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlsfiles"
	"github.com/portico-io/portico/internal/tlstest"
	"github.com/portico-io/portico/internal/xdstest"
)

// Rotation under load: while a gateway sends Check calls (a new connection,
// so a new handshake, every few calls) and extauthz holds its xDS stream,
// every certificate involved is rewritten — extauthz's, the control
// plane's, the gateway's. New handshakes then present the new
// certificates, the open xDS stream keeps delivering config, and no call
// fails.
func TestRotationUnderLoad(t *testing.T) {
	dbURL := testdeps.Postgres(t)
	p := tlstest.New(t)
	fast := func(c tlsfiles.Config) tlsfiles.Config { c.Interval = 50 * time.Millisecond; return c }
	cpTLS := fast(p.Files(t, identity.ControlPlane, "controlplane"))
	eaTLS := fast(p.Files(t, identity.ExtAuthz, "extauthz-0"))
	gwTLS := fast(p.Files(t, identity.Gateway, "gateway-0"))
	cp := startControlPlane(t, dbURL, controlplane.Config{TLS: cpTLS})
	ea := startExtauthzTLS(t, cp.XDS, "127.0.0.1:0", "e2e-rotate-extauthz", eaTLS)

	api := newAdminAPITLS(t, cp.Admin, p.ClientTLS(nil))
	key, v := api.seedKeyed()
	api.waitAcked("e2e-rotate-extauthz", "portico-extauthz", v, extauthzTypes...)

	gateway, err := tlsfiles.Load(gwTLS)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = gateway.Run(ctx) }()
	clientTLS := gateway.ClientConfig(identity.Policy{Roles: []identity.Role{identity.ExtAuthz}})
	check := keyedCheck(key)

	var calls, failures atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				cc, err := grpc.NewClient(ea.GRPC, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS)))
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
					return
				}
				client := authv3.NewAuthorizationClient(cc)
				for range 5 { // then a new connection: a new handshake
					cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
					resp, err := client.Check(cctx, check)
					ccancel()
					calls.Add(1)
					if err != nil || codes.Code(resp.GetStatus().GetCode()) != codes.OK {
						failures.Add(1)
						if err == nil {
							err = errDenied(resp)
						}
						firstErr.CompareAndSwap(nil, err)
					}
				}
				_ = cc.Close()
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	xdstest.Eventually(t, 10*time.Second, "load to start", func() bool { return calls.Load() > 50 })

	before := serverSerial(t, ea.GRPC, clientTLS)
	for _, c := range []struct {
		cfg  tlsfiles.Config
		role identity.Role
		name string
	}{{eaTLS, identity.ExtAuthz, "extauthz-0"}, {cpTLS, identity.ControlPlane, "controlplane"}, {gwTLS, identity.Gateway, "gateway-0"}} {
		p.Reissue(t, c.cfg, c.role, c.name)
	}
	want := fileSerial(t, eaTLS.CertFile)
	if want == before {
		t.Fatal("the reissued certificate has the old serial")
	}
	xdstest.Eventually(t, 10*time.Second, "new handshakes to present the rotated certificate", func() bool {
		return serverSerial(t, ea.GRPC, clientTLS) == want
	})
	rotatedAt := calls.Load()
	xdstest.Eventually(t, 10*time.Second, "load to go on after the rotation", func() bool { return calls.Load() > rotatedAt+200 })

	// The xDS stream opened before the rotation still delivers.
	v = api.create("routes", map[string]any{"name": "after", "match": map[string]any{"pathPrefix": "/after"}, "cluster": "echo",
		"auth": map[string]any{"mode": "apikey"}}, nil)
	api.waitAcked("e2e-rotate-extauthz", "portico-extauthz", v, extauthzTypes...)

	close(stop)
	wg.Wait()
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d of %d calls failed across the rotation; first: %v", n, calls.Load(), firstErr.Load())
	}
	t.Logf("%d Check calls, none failed, across a rotation of every certificate", calls.Load())
}

type deniedError struct{ msg string }

func (e deniedError) Error() string { return e.msg }

func errDenied(resp *authv3.CheckResponse) error {
	return deniedError{"denied: " + resp.GetStatus().GetMessage()}
}

// serverSerial opens a new TLS connection to addr and returns the serial
// of the certificate the server presents.
func serverSerial(t *testing.T, addr string, cfg *tls.Config) string {
	t.Helper()
	c := cfg.Clone()
	c.NextProtos = []string{"h2"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, c)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

func fileSerial(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pki.ParseCert(b)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String()
}
