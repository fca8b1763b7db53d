// Package adminclient is the Go client of the control plane's admin API
// (controlplane/admin), what porticoctl and tests speak it with: HTTPS
// trusting a given CA, a bearer token, the API's error envelope as *Error,
// a fresh Idempotency-Key on every POST, and If-Match on deletes. It does
// not retry.
//
// Resources travel as raw JSON: the client does not re-declare the spec
// types, so a field the server adds is carried through unchanged.
package adminclient

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/portico-io/portico/controlplane/admin"
	"github.com/portico-io/portico/controlplane/spec"
)

// DefaultTimeout bounds each request.
const DefaultTimeout = 30 * time.Second

// Config configures a Client. Server and Token are required.
type Config struct {
	// Server is the API's base URL ("https://localhost:18080"); http is
	// accepted for a plaintext test server.
	Server string
	// Token is the bearer token (API token or operator JWT).
	Token string
	// CAFile is the PEM bundle to trust; "" uses the system roots.
	CAFile string
	// Timeout bounds each request; 0 means DefaultTimeout.
	Timeout time.Duration
	// Author and Reason are sent as X-Portico-Author / X-Portico-Reason.
	Author, Reason string
}

// Client calls the admin API. It is safe for concurrent use.
type Client struct {
	base *url.URL
	cfg  Config
	hc   *http.Client
}

// Error is an error answer of the API.
type Error struct {
	Status  int
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field"`
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
	if e.Field != "" {
		s = fmt.Sprintf("%d %s: %s: %s", e.Status, e.Code, e.Field, e.Message)
	}
	return s
}

// IsNotFound reports whether err is the API's 404.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

// New validates cfg and builds a Client.
func New(cfg Config) (*Client, error) {
	if cfg.Server == "" {
		return nil, errors.New("adminclient: Server is required")
	}
	if cfg.Token == "" {
		return nil, errors.New("adminclient: Token is required")
	}
	u, err := url.Parse(strings.TrimRight(cfg.Server, "/"))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("adminclient: server %q: want https://host:port", cfg.Server)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("adminclient: CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("adminclient: CA file %s holds no PEM certificate", cfg.CAFile)
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	return &Client{base: u, cfg: cfg, hc: &http.Client{Timeout: cfg.Timeout, Transport: tr}}, nil
}

// request is one call.
type request struct {
	method, path string
	query        url.Values
	body         any
	header       http.Header
}

// do sends rq and decodes a 2xx JSON answer into out (when non-nil).
func (c *Client) do(ctx context.Context, rq request, out any) (http.Header, error) {
	var body io.Reader
	if rq.body != nil {
		b, err := json.Marshal(rq.body)
		if err != nil {
			return nil, fmt.Errorf("adminclient: encode: %w", err)
		}
		body = bytes.NewReader(b)
	}
	u := *c.base
	u.Path += admin.Prefix + rq.path
	if rq.query != nil {
		u.RawQuery = rq.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, rq.method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("adminclient: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.cfg.Author != "" {
		req.Header.Set(admin.HeaderAuthor, c.cfg.Author)
	}
	if c.cfg.Reason != "" {
		req.Header.Set(admin.HeaderReason, c.cfg.Reason)
	}
	if rq.method == http.MethodPost && rq.header.Get(admin.HeaderIdempotencyKey) == "" {
		req.Header.Set(admin.HeaderIdempotencyKey, newKey())
	}
	for k, v := range rq.header {
		req.Header[k] = v
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var ua x509.UnknownAuthorityError
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			err = fmt.Errorf("%w (is the control plane running at %s?)", err, c.base.Host)
		case errors.As(err, &ua):
			err = fmt.Errorf("%w (trust the platform CA: --cacert)", err)
		}
		return nil, fmt.Errorf("adminclient: %s %s: %w", rq.method, rq.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.Header, fmt.Errorf("adminclient: %s %s: %w", rq.method, rq.path, err)
	}
	if resp.StatusCode >= 300 {
		var env struct {
			Error *Error `json:"error"`
		}
		if json.Unmarshal(b, &env) != nil || env.Error == nil {
			return resp.Header, &Error{Status: resp.StatusCode, Code: "http_" + strconv.Itoa(resp.StatusCode), Message: strings.TrimSpace(string(b))}
		}
		env.Error.Status = resp.StatusCode
		return resp.Header, env.Error
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.Header, fmt.Errorf("adminclient: %s %s: decode: %w", rq.method, rq.path, err)
		}
	}
	return resp.Header, nil
}

func newKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return "porticoctl-" + hex.EncodeToString(b)
}

type page struct {
	Items      []json.RawMessage `json:"items"`
	NextCursor string            `json:"nextCursor"`
}

// List returns every resource of kind, following the cursor.
func (c *Client) List(ctx context.Context, kind spec.Kind) ([]json.RawMessage, error) {
	var out []json.RawMessage
	for cursor := ""; ; {
		var p page
		q := url.Values{"limit": {"1000"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		if _, err := c.do(ctx, request{method: http.MethodGet, path: "/" + string(kind), query: q}, &p); err != nil {
			return nil, err
		}
		out = append(out, p.Items...)
		if p.NextCursor == "" {
			return out, nil
		}
		cursor = p.NextCursor
	}
}

// Get returns a resource and its ETag.
func (c *Client) Get(ctx context.Context, kind spec.Kind, name string) (json.RawMessage, string, error) {
	var out json.RawMessage
	hdr, err := c.do(ctx, request{method: http.MethodGet, path: "/" + string(kind) + "/" + url.PathEscape(name)}, &out)
	if err != nil {
		return nil, "", err
	}
	return out, hdr.Get("ETag"), nil
}

// Delete deletes a resource at its current revision and returns the
// version that deleted it.
func (c *Client) Delete(ctx context.Context, kind spec.Kind, name string) (int64, error) {
	_, tag, err := c.Get(ctx, kind, name)
	if err != nil {
		return 0, err
	}
	hdr, err := c.do(ctx, request{method: http.MethodDelete, path: "/" + string(kind) + "/" + url.PathEscape(name),
		header: http.Header{"If-Match": {tag}}}, nil)
	if err != nil {
		return 0, err
	}
	v, _ := strconv.ParseInt(hdr.Get(admin.HeaderConfigVersion), 10, 64)
	return v, nil
}

// Apply sends a batch to POST /config:apply (dry: ?dryRun=true).
func (c *Client) Apply(ctx context.Context, req admin.ApplyRequest, dry bool) (admin.ApplyResponse, error) {
	var out admin.ApplyResponse
	var q url.Values
	if dry {
		q = url.Values{"dryRun": {"true"}}
	}
	_, err := c.do(ctx, request{method: http.MethodPost, path: admin.ApplyPath, query: q, body: req}, &out)
	return out, err
}

// Version is one config version's metadata.
type Version struct {
	Version    int64     `json:"version"`
	CreatedAt  time.Time `json:"createdAt"`
	Author     string    `json:"author"`
	Reason     string    `json:"reason"`
	RollbackOf *int64    `json:"rollbackOf,omitempty"`
}

// Head returns the newest config version (0 before the first change).
func (c *Client) Head(ctx context.Context) (int64, error) {
	var p struct {
		Items []Version `json:"items"`
	}
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/config/versions", query: url.Values{"limit": {"1"}}}, &p); err != nil {
		return 0, err
	}
	if len(p.Items) == 0 {
		return 0, nil
	}
	return p.Items[0].Version, nil
}

// Versions returns up to limit versions, newest first.
func (c *Client) Versions(ctx context.Context, limit int) ([]Version, error) {
	var p struct {
		Items []Version `json:"items"`
	}
	_, err := c.do(ctx, request{method: http.MethodGet, path: "/config/versions", query: url.Values{"limit": {strconv.Itoa(limit)}}}, &p)
	return p.Items, err
}

// ConfigView is a whole config as GET /config/versions/{n} shows it: kind
// (the view's field name, e.g. "ratelimitRules") → resources in name
// order, plus apiKeyCount.
type ConfigView map[string]json.RawMessage

// Config returns the whole config at version n (the head when n is 0)
// and the version it is.
func (c *Client) Config(ctx context.Context, n int64) (ConfigView, int64, error) {
	if n == 0 {
		h, err := c.Head(ctx)
		if err != nil || h == 0 {
			return ConfigView{}, 0, err
		}
		n = h
	}
	var v struct {
		Config ConfigView `json:"config"`
	}
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/config/versions/" + strconv.FormatInt(n, 10)}, &v); err != nil {
		return nil, 0, err
	}
	return v.Config, n, nil
}

// Rollback makes a new version whose content equals version to.
func (c *Client) Rollback(ctx context.Context, to int64) (int64, error) {
	var out struct {
		Version int64 `json:"version"`
	}
	_, err := c.do(ctx, request{method: http.MethodPost, path: "/config/rollback", body: map[string]int64{"toVersion": to}}, &out)
	return out.Version, err
}

// Raw GETs path (under /admin/v1) and returns the JSON answer.
func (c *Client) Raw(ctx context.Context, path string) (json.RawMessage, error) {
	var out json.RawMessage
	_, err := c.do(ctx, request{method: http.MethodGet, path: path}, &out)
	return out, err
}

// Post POSTs body to path (under /admin/v1) and returns the JSON answer.
func (c *Client) Post(ctx context.Context, path string, body any) (json.RawMessage, error) {
	var out json.RawMessage
	if body == nil {
		body = struct{}{}
	}
	_, err := c.do(ctx, request{method: http.MethodPost, path: path, body: body}, &out)
	return out, err
}
