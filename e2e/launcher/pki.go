package launcher

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/pki"
	"github.com/portico-io/portico/internal/tlsfiles"
)

// PKIDir holds the platform CA of a local run and one certificate and key
// per process (<file>.crt, <file>.key), made on the first run and renewed
// by the launcher while it runs.
func PKIDir(root string) string { return filepath.Join(root, ".run", "pki") }

// Workload is a process's identity in a local run.
type Workload struct {
	File string // file name without extension in PKIDir
	Role identity.Role
	Name string
}

// workloads are the identities of make run's processes. Every certificate
// carries the SANs localhost and 127.0.0.1 too, so curl can call a TLS
// endpoint with --cacert .run/pki/ca.crt.
func workloads() []Workload {
	ws := []Workload{
		{"controlplane", identity.ControlPlane, "controlplane"},
		{"extauthz", identity.ExtAuthz, "extauthz"},
		{"ratelimitsvc", identity.RateLimit, "ratelimitsvc"},
		{"gateway", identity.Gateway, "gateway-0"},
		{"scheduler", identity.Scheduler, "scheduler"},
		{"worker", identity.Worker, "worker-0"}, // for a remote worker of the scheduler
		{"operator", identity.Operator, "operator"},
	}
	for i := range 3 {
		ws = append(ws, Workload{fmt.Sprintf("kvnode-%d", i), identity.KVNode, fmt.Sprintf("kv-%d", i)})
	}
	for i := range CacheNodes {
		ws = append(ws, Workload{fmt.Sprintf("cachenode-%d", i), identity.CacheNode, fmt.Sprintf("cache-%d", i)})
	}
	return ws
}

// TLSArgs are the flags giving a process its certificate files.
func TLSArgs(root, file string) []string {
	dir := PKIDir(root)
	return []string{
		"--tls-cert-file=" + filepath.Join(dir, file+".crt"),
		"--tls-key-file=" + filepath.Join(dir, file+".key"),
		"--tls-ca-file=" + filepath.Join(dir, pki.CACertFile),
	}
}

// gatewayTLSArgs tell the control plane where the gateway's certificate
// files are on the gateway host (here: this machine, as absolute paths, for
// Envoy reads them whatever its working directory), so Envoy calls
// extauthz and ratelimitsvc over mutual TLS.
func gatewayTLSArgs(root string) []string {
	dir, err := filepath.Abs(PKIDir(root))
	if err != nil {
		dir = PKIDir(root)
	}
	return []string{
		"--gateway-tls-cert-file=" + filepath.Join(dir, "gateway.crt"),
		"--gateway-tls-key-file=" + filepath.Join(dir, "gateway.key"),
		"--gateway-tls-ca-file=" + filepath.Join(dir, pki.CACertFile),
	}
}

// EnsurePKI creates the CA on the first run and issues every workload's
// certificate that is missing, renews those due (less than a third of
// their life left), and leaves the rest alone. It reports what it did.
func EnsurePKI(root string, out io.Writer, now time.Time) error {
	dir := PKIDir(root)
	ca, err := pki.LoadCA(dir)
	if errors.Is(err, os.ErrNotExist) {
		if ca, err = pki.NewCA(identity.DefaultTrustDomain, 0, now); err != nil {
			return err
		}
		if err = ca.Write(dir); err != nil {
			return err
		}
		fmt.Fprintf(out, "portico: created the platform CA in %s (spiffe://%s)\n", dir, ca.TrustDomain)
	}
	if err != nil {
		return err
	}
	issued := 0
	for _, w := range workloads() {
		certFile, keyFile := filepath.Join(dir, w.File+".crt"), filepath.Join(dir, w.File+".key")
		if _, err := os.Stat(certFile); errors.Is(err, os.ErrNotExist) {
			certPEM, keyPEM, err := ca.Issue(pki.Request{Role: w.Role, Name: w.Name,
				DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}, now)
			if err != nil {
				return err
			}
			if err := pki.WritePair(certFile, keyFile, certPEM, keyPEM); err != nil {
				return err
			}
			issued++
			continue
		}
		if _, err := ca.Renew(certFile, keyFile, 0, 0, now); err != nil {
			return err
		}
	}
	if issued > 0 {
		fmt.Fprintf(out, "portico: issued %d workload certificates in %s\n", issued, dir)
	}
	return nil
}

// renewLoop renews due certificates until ctx is done; processes reload
// their files by themselves.
func renewLoop(ctx context.Context, root string, out io.Writer) {
	t := time.NewTicker(10 * time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := EnsurePKI(root, out, time.Now()); err != nil {
				fmt.Fprintf(out, "portico: renewing certificates: %v\n", err)
			}
		}
	}
}

// operatorFiles loads the operator certificate of a local run: the launcher
// (and the tests driving it) call the platform's TLS ports with it.
func operatorFiles(root string) (*tlsfiles.Files, error) {
	dir := PKIDir(root)
	f, err := tlsfiles.Load(tlsfiles.Config{CertFile: filepath.Join(dir, "operator.crt"), KeyFile: filepath.Join(dir, "operator.key"),
		CAFile: filepath.Join(dir, pki.CACertFile)})
	if err != nil {
		return nil, fmt.Errorf("operator certificate: %w", err)
	}
	return f, nil
}

// OperatorTLS is a client configuration for the TLS ports of the local run
// at root: it presents the operator certificate and accepts any platform
// identity (the SPIFFE ID is checked, not the host name).
func OperatorTLS(root string) (*tls.Config, error) {
	f, err := operatorFiles(root)
	if err != nil {
		return nil, err
	}
	return f.ClientConfig(identity.Policy{}), nil
}
