// Package kubesecret is the smallest Kubernetes client porticoctl needs:
// get, create and replace Secrets of one namespace, over net/http, as the
// pod's service account. client-go would bring a dependency tree larger
// than the rest of the tool for these three calls.
//
// Contract with the caller: Update is optimistic — it sends the
// resourceVersion of the Secret it replaces, and a Secret changed since
// (another sync, a person) yields ErrConflict instead of being overwritten.
// Create of a name that exists yields ErrExists. Secret data never appears
// in errors.
package kubesecret

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// In-cluster locations (the service account volume Kubernetes mounts into
// a pod with automountServiceAccountToken) and environment.
const (
	DefaultServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	envHost                  = "KUBERNETES_SERVICE_HOST"
	envPort                  = "KUBERNETES_SERVICE_PORT"
	// DefaultTimeout bounds each API call.
	DefaultTimeout = 10 * time.Second
)

// TypeTLS is the Secret type cert-manager writes too: tls.crt and tls.key
// are required, ca.crt may ride along.
const TypeTLS = "kubernetes.io/tls"

// TypeOpaque is the type of a Secret of arbitrary keys.
const TypeOpaque = "Opaque"

// Secret is the part of a core/v1 Secret porticoctl reads and writes.
type Secret struct {
	APIVersion string            `json:"apiVersion,omitempty"`
	Kind       string            `json:"kind,omitempty"`
	Metadata   Metadata          `json:"metadata"`
	Type       string            `json:"type,omitempty"`
	Data       map[string][]byte `json:"data,omitempty"` // base64 on the wire, as the API wants
}

// Metadata is the part of ObjectMeta porticoctl uses.
type Metadata struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace,omitempty"`
	ResourceVersion string            `json:"resourceVersion,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	Annotations     map[string]string `json:"annotations,omitempty"`
}

// Config says how to reach the API server.
type Config struct {
	// Server is the API server's base URL, e.g. https://10.0.0.1:443.
	Server string
	// TokenFile holds the bearer token; it is read at every call, as the
	// kubelet rotates projected tokens in place.
	TokenFile string
	// RootCAs verifies the API server's certificate.
	RootCAs *x509.CertPool
	// Namespace of the Secrets.
	Namespace string
	// Timeout of each call (default DefaultTimeout).
	Timeout time.Duration
	// Transport, when set, replaces the TLS transport built from RootCAs
	// (tests).
	Transport http.RoundTripper
}

// InCluster returns the Config of a pod's service account from dir (default
// DefaultServiceAccountDir) and KUBERNETES_SERVICE_HOST/PORT. namespace ""
// means the service account's own namespace.
func InCluster(dir, namespace string) (Config, error) {
	if dir == "" {
		dir = DefaultServiceAccountDir
	}
	host, port := os.Getenv(envHost), os.Getenv(envPort)
	if host == "" || port == "" {
		return Config{}, fmt.Errorf("%w: %s and %s are not set (not in a pod?)", ErrConfig, envHost, envPort)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return Config{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return Config{}, fmt.Errorf("%w: %s holds no PEM certificate", ErrConfig, filepath.Join(dir, "ca.crt"))
	}
	if namespace == "" {
		b, err := os.ReadFile(filepath.Join(dir, "namespace"))
		if err != nil {
			return Config{}, fmt.Errorf("%w: no --namespace and %v", ErrConfig, err)
		}
		namespace = strings.TrimSpace(string(b))
	}
	return Config{
		Server:    "https://" + net.JoinHostPort(host, port),
		TokenFile: filepath.Join(dir, "token"),
		RootCAs:   pool,
		Namespace: namespace,
	}, nil
}

// Client reads and writes the Secrets of one namespace. Safe for
// concurrent use.
type Client struct {
	cfg  Config
	base *url.URL
	http *http.Client
}

// New returns a Client for cfg.
func New(cfg Config) (*Client, error) {
	if cfg.Server == "" || cfg.TokenFile == "" || cfg.Namespace == "" {
		return nil, fmt.Errorf("%w: server, token file and namespace are required", ErrConfig)
	}
	base, err := url.Parse(cfg.Server)
	if err != nil || base.Scheme != "https" || base.Host == "" {
		return nil, fmt.Errorf("%w: server %q: want https://host:port", ErrConfig, cfg.Server)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	tr := cfg.Transport
	if tr == nil {
		if cfg.RootCAs == nil {
			return nil, fmt.Errorf("%w: no CA to verify the API server", ErrConfig)
		}
		tr = &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout: cfg.Timeout,
		}
	}
	// No client-level timeout: each call carries its own deadline.
	return &Client{cfg: cfg, base: base, http: &http.Client{Transport: tr}}, nil
}

// Namespace returns the namespace the client works in.
func (c *Client) Namespace() string { return c.cfg.Namespace }

// Get returns the Secret name, or ErrNotFound.
func (c *Client) Get(ctx context.Context, name string) (*Secret, error) {
	var s Secret
	if err := c.do(ctx, http.MethodGet, name, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Create creates s in the client's namespace and returns it as stored, or
// ErrExists.
func (c *Client) Create(ctx context.Context, s *Secret) (*Secret, error) {
	body := c.normalize(s)
	var out Secret
	if err := c.do(ctx, http.MethodPost, "", body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Update replaces s, which must carry the resourceVersion it was read at,
// and returns it as stored; ErrConflict when it changed since.
func (c *Client) Update(ctx context.Context, s *Secret) (*Secret, error) {
	if s.Metadata.ResourceVersion == "" {
		return nil, fmt.Errorf("%w: update of %s without a resourceVersion would overwrite blindly", ErrConfig, s.Metadata.Name)
	}
	body := c.normalize(s)
	var out Secret
	if err := c.do(ctx, http.MethodPut, s.Metadata.Name, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (c *Client) normalize(s *Secret) *Secret {
	cp := *s
	cp.APIVersion, cp.Kind = "v1", "Secret"
	cp.Metadata.Namespace = c.cfg.Namespace
	return &cp
}

// do runs one call: name "" addresses the collection.
func (c *Client) do(ctx context.Context, method, name string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	p := "/api/v1/namespaces/" + url.PathEscape(c.cfg.Namespace) + "/secrets"
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	u := c.base.JoinPath(p)
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("kubesecret: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return fmt.Errorf("kubesecret: %w", err)
	}
	token, err := os.ReadFile(c.cfg.TokenFile)
	if err != nil {
		return fmt.Errorf("%w: token: %v", ErrConfig, err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("kubesecret: %s %s: %w", method, p, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("kubesecret: %s %s: %w", method, p, err)
	}
	if resp.StatusCode/100 != 2 {
		return statusError(method, p, resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("kubesecret: %s %s: decode: %w", method, p, err)
	}
	return nil
}

// statusError turns a failed call into an error naming the API server's
// reason (a metav1.Status body); it quotes only the Status message, never
// the request.
func statusError(method, path string, code int, raw []byte) error {
	var st struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(raw, &st) // a non-Status body leaves the fields empty
	return &APIError{Method: method, Path: path, Code: code, Reason: st.Reason, Message: st.Message}
}
