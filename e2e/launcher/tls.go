package launcher

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// DemoHTTPSPort is where the demo HTTPS listener serves the demo routes.
const DemoHTTPSPort = 10443

// demoTLSDir holds the demo CA and the gateway's certificate and key, made
// once per checkout so that a browser or curl can keep trusting the CA.
func demoTLSDir(root string) string { return filepath.Join(root, ".run", "demo-tls") }

// ensureDemoTLS makes a CA and a localhost certificate signed by it unless
// they exist, and returns the certificate and key PEM.
func ensureDemoTLS(root string) (certPEM, keyPEM []byte, err error) {
	dir := demoTLSDir(root)
	certFile, keyFile := filepath.Join(dir, "gateway.crt"), filepath.Join(dir, "gateway.key")
	certPEM, cerr := os.ReadFile(certFile)
	keyPEM, kerr := os.ReadFile(keyFile)
	if cerr == nil && kerr == nil {
		return certPEM, keyPEM, nil
	}
	if !errors.Is(cerr, fs.ErrNotExist) && cerr != nil {
		return nil, nil, cerr
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Portico demo CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, caKey.Public(), caKey)
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{{"ca.crt", caPEM, 0o644}, {"gateway.key", keyPEM, 0o600}, {"gateway.crt", certPEM, 0o644}} {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return nil, nil, err
		}
	}
	return certPEM, keyPEM, nil
}

// SeedTLS adds the demo HTTPS listener: the localhost certificate as an
// inline secret (the control plane seals its key) and a listener on
// DemoHTTPSPort. Existing resources are left as they are.
func SeedTLS(ctx context.Context, client *http.Client, adminURL, root string) error {
	certPEM, keyPEM, err := ensureDemoTLS(root)
	if err != nil {
		return fmt.Errorf("demo certificate: %w", err)
	}
	secret, _ := json.Marshal(map[string]string{"name": "demo-tls", "type": "tls", "certificate": string(certPEM), "privateKey": string(keyPEM)})
	listener, _ := json.Marshal(map[string]any{"name": "https", "port": DemoHTTPSPort, "tls": map[string]any{"certificates": []string{"demo-tls"}}})
	for _, d := range []struct {
		path string
		body []byte
	}{{"/admin/v1/secrets", secret}, {"/admin/v1/listeners", listener}} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, adminURL+d.path, bytes.NewReader(d.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", fmt.Sprintf("portico-demo-%x", sha256.Sum256(append([]byte(d.path), d.body...))))
		req.Header.Set("X-Portico-Author", "make-run")
		req.Header.Set("X-Portico-Reason", "demo HTTPS listener")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusConflict {
			return fmt.Errorf("POST %s: %d %s", d.path, resp.StatusCode, bytes.TrimSpace(body))
		}
	}
	return nil
}
