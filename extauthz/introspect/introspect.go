// Package introspect validates opaque access tokens with OAuth 2.0 Token
// Introspection (RFC 7662) against a provider's endpoint.
//
// Answers are cached by the SHA-256 of the token (never the token itself)
// until min(exp, MaxTTL), so a revoked opaque token stops working within
// MaxTTL; concurrent lookups of one token share one call (single-flight).
// Any failure to get an answer is an error, which callers turn into a deny.
package introspect

import (
	"context"
	"crypto/sha256"
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
	URI       string
	MaxTTL    time.Duration
	Timeout   time.Duration
	CacheSize int
	// HTTPClient defaults to one that follows no redirects.
	HTTPClient *http.Client
	// OnCall is called after each call to the endpoint with "active",
	// "inactive" or "error".
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
	cfg   Config
	sf    singleflight.Group
	mu    sync.Mutex
	cache map[[sha256.Size]byte]entry
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
	return &Client{cfg: cfg, cache: map[[sha256.Size]byte]entry{}}, nil
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
	form := url.Values{"token": {token}, "token_type_hint": {"access_token"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.URI, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
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

var (
	// ErrConfig is a bad Config.
	ErrConfig = errors.New("introspect: bad config")
	// ErrUnavailable means no answer was obtained (callers deny).
	ErrUnavailable = errors.New("introspect: endpoint unavailable")
)
