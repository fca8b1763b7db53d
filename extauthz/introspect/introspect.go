// Package introspect validates opaque access tokens with OAuth 2.0 Token
// Introspection (RFC 7662) against a provider's endpoint, authenticating
// with client_secret_basic.
//
// Answers are cached by the SHA-256 of the token (never the token itself)
// until min(exp, MaxTTL), so a revoked opaque token stops working within
// MaxTTL. Anyone can send a bearer string, so the endpoint is shielded:
// concurrent lookups of one token share one call (single-flight), and calls
// go through a token bucket (RequestsPerSecond, Burst); a lookup that finds
// it empty fails with ErrRateLimited without calling. Any failure to get an
// answer is an error, which callers turn into a deny.
package introspect

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/portico-io/portico/internal/idp"
)

// Defaults for Config.
const (
	DefaultMaxTTL    = 60 * time.Second
	DefaultTimeout   = 2 * time.Second
	DefaultCacheSize = 10_000
	maxBody          = 64 << 10
)

// Config configures a Client. Zero values take the defaults.
type Config struct {
	// URI is the introspection endpoint (required).
	URI string
	// ClientID and ClientSecret (both required) authenticate every call
	// with client_secret_basic (RFC 7662 §2.1, RFC 6749 §2.3.1).
	// ClientSecret is asked for at each call, so a rotated secret needs no
	// new Client; when it fails, no call is made. The secret is never
	// logged or put in an error.
	ClientID     string
	ClientSecret func() (string, error)
	// RequestsPerSecond refills the bucket in front of the endpoint
	// (default idp.DefaultRequestsPerSecond); Burst is its size (default
	// one second's worth).
	RequestsPerSecond float64
	Burst             int
	MaxTTL            time.Duration
	Timeout           time.Duration
	CacheSize         int
	// HTTPClient defaults to one that follows no redirects.
	HTTPClient *http.Client
	// OnCall is called after each call to the endpoint with "active",
	// "inactive" or "error", and with "rate_limited" for each call the
	// bucket refused.
	OnCall  func(result string)
	TimeNow func() time.Time
}

// Result is the endpoint's answer (the members Portico uses).
type Result struct {
	Active   bool     `json:"active"`
	Scope    string   `json:"scope"`
	ClientID string   `json:"client_id"`
	Subject  string   `json:"sub"`
	Issuer   string   `json:"iss"`
	Audience audience `json:"aud"`
	Expiry   float64  `json:"exp"`
	ID       string   `json:"jti"`
	Tenant   string   `json:"tenant"`
	Tier     string   `json:"tier"`
}

// ExpiresAt returns exp as a time (zero when absent).
func (r *Result) ExpiresAt() time.Time {
	if r.Expiry <= 0 {
		return time.Time{}
	}
	return time.Unix(int64(r.Expiry), 0)
}

// Audiences returns aud as a list.
func (r *Result) Audiences() []string { return r.Audience }

type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	if strings.HasPrefix(strings.TrimSpace(string(b)), "[") {
		var s []string
		err := json.Unmarshal(b, &s)
		*a = s
		return err
	}
	var s string
	err := json.Unmarshal(b, &s)
	*a = []string{s}
	return err
}

// Client introspects tokens at one endpoint. Safe for concurrent use.
type Client struct {
	cfg    Config
	sf     singleflight.Group
	bucket bucket
	mu     sync.Mutex
	cache  map[[sha256.Size]byte]entry
}

type entry struct {
	res   *Result
	until time.Time
}

// New returns a Client.
func New(cfg Config) (*Client, error) {
	if cfg.URI == "" {
		return nil, fmt.Errorf("%w: no URI", ErrConfig)
	}
	if cfg.ClientID == "" || cfg.ClientSecret == nil {
		return nil, fmt.Errorf("%w: no client credentials", ErrConfig)
	}
	if cfg.RequestsPerSecond <= 0 {
		cfg.RequestsPerSecond = idp.DefaultRequestsPerSecond
	}
	if cfg.Burst <= 0 {
		cfg.Burst = max(1, int(cfg.RequestsPerSecond))
	}
	if cfg.MaxTTL <= 0 {
		cfg.MaxTTL = DefaultMaxTTL
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = DefaultCacheSize
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if cfg.TimeNow == nil {
		cfg.TimeNow = time.Now
	}
	c := &Client{cfg: cfg, cache: map[[sha256.Size]byte]entry{}}
	c.bucket = bucket{rate: cfg.RequestsPerSecond, size: float64(cfg.Burst), tokens: float64(cfg.Burst), last: cfg.TimeNow()}
	return c, nil
}

// URI is the endpoint the client calls.
func (c *Client) URI() string { return c.cfg.URI }

// Introspect returns the (possibly cached) answer for token.
func (c *Client) Introspect(ctx context.Context, token string) (*Result, error) {
	key := sha256.Sum256([]byte(token))
	if r := c.cached(key); r != nil {
		return r, nil
	}
	v, err, _ := c.sf.Do(hex.EncodeToString(key[:]), func() (any, error) {
		// A flight that finished just before this one started has filled
		// the cache: check again so one token costs one call.
		if r := c.cached(key); r != nil {
			return r, nil
		}
		if !c.bucket.take(c.cfg.TimeNow()) {
			c.report("rate_limited")
			return nil, ErrRateLimited
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.Timeout)
		defer cancel()
		r, err := c.call(cctx, token)
		if err != nil {
			c.report("error")
			return nil, err
		}
		if r.Active {
			c.report("active")
		} else {
			c.report("inactive")
		}
		now := c.cfg.TimeNow()
		until := now.Add(c.cfg.MaxTTL)
		if exp := r.ExpiresAt(); !exp.IsZero() && exp.Before(until) {
			until = exp
		}
		c.store(key, entry{res: r, until: until})
		return r, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*Result), nil
}

func (c *Client) report(r string) {
	if c.cfg.OnCall != nil {
		c.cfg.OnCall(r)
	}
}

func (c *Client) cached(key [sha256.Size]byte) *Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.cache[key]
	if !ok {
		return nil
	}
	if !c.cfg.TimeNow().Before(e.until) {
		delete(c.cache, key)
		return nil
	}
	return e.res
}

func (c *Client) store(key [sha256.Size]byte, e entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cache) >= c.cfg.CacheSize {
		for k := range c.cache {
			delete(c.cache, k)
			break
		}
	}
	c.cache[key] = e
}

func (c *Client) call(ctx context.Context, token string) (*Result, error) {
	secret, err := c.cfg.ClientSecret()
	if err != nil {
		// err names the secret, never its value.
		return nil, fmt.Errorf("%w: %w", ErrCredentials, err)
	}
	form := url.Values{"token": {token}, "token_type_hint": {"access_token"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.URI, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	req.Header.Set("Authorization", basicAuth(c.cfg.ClientID, secret))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: status %d", ErrUnavailable, resp.StatusCode)
	}
	var r Result
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: bad response: %v", ErrUnavailable, err)
	}
	return &r, nil
}

// bucket is a token bucket on the Client's clock: it holds up to size
// tokens, refills rate per second and starts full.
type bucket struct {
	mu     sync.Mutex
	rate   float64
	size   float64
	tokens float64
	last   time.Time
}

// take spends one token if there is one.
func (b *bucket) take(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.After(b.last) {
		b.tokens = min(b.size, b.tokens+now.Sub(b.last).Seconds()*b.rate)
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// basicAuth is client_secret_basic: RFC 6749 §2.3.1 form-urlencodes the
// id and the secret before they become HTTP Basic's user and password
// (net/http's SetBasicAuth does not, and a secret with ':', '+' or '%'
// would then reach the IdP as something else).
func basicAuth(id, secret string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(url.QueryEscape(id)+":"+url.QueryEscape(secret)))
}

var (
	// ErrCredentials means the client secret could not be read, so no
	// call was made (callers deny).
	ErrCredentials = errors.New("introspect: client credentials unavailable")
	// ErrRateLimited means the endpoint's call budget is spent: no call
	// was made (callers deny).
	ErrRateLimited = errors.New("introspect: rate limited")
	// ErrConfig is a bad Config.
	ErrConfig = errors.New("introspect: bad config")
	// ErrUnavailable means no answer was obtained (callers deny).
	ErrUnavailable = errors.New("introspect: endpoint unavailable")
)
