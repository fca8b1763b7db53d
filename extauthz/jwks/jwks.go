// Package jwks keeps one provider's JSON Web Key Set: fetched over HTTP(S)
// and cached for a TTL, or given inline.
//
// Refreshes are single-flight (concurrent callers share one fetch) and
// rate-limited to one per MinRefreshInterval, whatever triggers them: an
// expired TTL or a token naming an unknown kid. Tokens with random kids can
// therefore cost at most one fetch per interval. A failed refresh keeps the
// last good set.
package jwks

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/sync/singleflight"

	"github.com/portico-io/portico/extauthz/policy"
)

// Defaults for Config.
const (
	DefaultMinRefreshInterval = 30 * time.Second
	DefaultFetchTimeout       = 5 * time.Second
	// MaxBodyBytes bounds a JWKS response.
	MaxBodyBytes = 1 << 20
)

// Config configures a Source. Zero values take the defaults.
type Config struct {
	// URI is the JWKS endpoint; Inline a fixed set (exactly one is set).
	URI    string
	Inline *jose.JSONWebKeySet
	// TTL is how long a fetched set is fresh (default policy.DefaultJWKSCacheTTL).
	TTL time.Duration
	// MinRefreshInterval is the least time between two fetch attempts.
	MinRefreshInterval time.Duration
	FetchTimeout       time.Duration
	Client             *http.Client
	// OnFetch is called after every fetch attempt ("ok" or "error").
	OnFetch func(result string)
	// OnChange is called when a fetch installs a set with different keys.
	OnChange func()
	// TimeNow is the clock (default time.Now); tests inject one.
	TimeNow func() time.Time
}

// Key is one verification key.
type Key struct {
	Key crypto.PublicKey
	// Alg is the JWK's "alg" member (may be empty).
	Alg string
}

// set is an immutable indexed key set.
type set struct {
	byKID   map[string]Key
	all     []Key
	raw     string // canonical form, to detect changes
	fetched time.Time
}

// Source serves the keys of one provider. It is safe for concurrent use.
type Source struct {
	cfg         Config
	cur         atomic.Pointer[set]
	sf          singleflight.Group
	mu          sync.Mutex // guards lastAttempt
	lastAttempt time.Time
}

// New returns a Source. With a URI nothing is fetched until the first
// lookup (or Prefetch).
func New(cfg Config) (*Source, error) {
	if (cfg.URI == "") == (cfg.Inline == nil) {
		return nil, fmt.Errorf("%w: exactly one of URI and Inline", ErrConfig)
	}
	if cfg.TTL <= 0 {
		cfg.TTL = policy.DefaultJWKSCacheTTL
	}
	if cfg.MinRefreshInterval <= 0 {
		cfg.MinRefreshInterval = DefaultMinRefreshInterval
	}
	if cfg.FetchTimeout <= 0 {
		cfg.FetchTimeout = DefaultFetchTimeout
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{
			// Never follow a redirect to somewhere the operator did not configure.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if cfg.TimeNow == nil {
		cfg.TimeNow = time.Now
	}
	s := &Source{cfg: cfg}
	if cfg.Inline != nil {
		s.cur.Store(index(cfg.Inline, time.Time{}))
	}
	return s, nil
}

func index(ks *jose.JSONWebKeySet, at time.Time) *set {
	st := &set{byKID: map[string]Key{}, fetched: at}
	for _, k := range ks.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		key := Key{Key: k.Key, Alg: k.Algorithm}
		st.all = append(st.all, key)
		if k.KeyID != "" {
			if _, dup := st.byKID[k.KeyID]; !dup {
				st.byKID[k.KeyID] = key
			}
		}
		b, _ := k.MarshalJSON()
		st.raw += string(b) + "\n"
	}
	return st
}

// Keys returns the keys that may verify a token with this kid: the key
// with that id, or every key when kid is empty. An unknown kid or a missing
// set triggers a refresh the caller waits for; a stale set that knows the
// kid is used while a refresh runs in the background. Both are subject to
// the rate limit. If the kid is still unknown Keys returns ErrUnknownKID.
func (s *Source) Keys(ctx context.Context, kid string) ([]Key, error) {
	cur := s.cur.Load()
	if s.cfg.Inline != nil {
		return lookup(cur, kid)
	}
	if cur != nil {
		if ks, err := lookup(cur, kid); err == nil {
			if s.cfg.TimeNow().Sub(cur.fetched) >= s.cfg.TTL {
				// Stale but usable: refresh in the background rather than
				// make this request wait on the IdP (Envoy's ext_authz
				// timeout is short).
				go func() { _, _ = s.refresh(context.WithoutCancel(ctx)) }()
			}
			return ks, nil
		}
	}
	next, err := s.refresh(ctx)
	if next == nil {
		if err == nil {
			err = ErrUnavailable
		}
		return nil, err
	}
	return lookup(next, kid)
}

func lookup(st *set, kid string) ([]Key, error) {
	if kid == "" {
		if len(st.all) == 0 {
			return nil, ErrUnknownKID
		}
		return st.all, nil
	}
	k, ok := st.byKID[kid]
	if !ok {
		return nil, ErrUnknownKID
	}
	return []Key{k}, nil
}

// Prefetch fetches the set if it has none (used when a provider appears).
func (s *Source) Prefetch(ctx context.Context) error {
	if s.cfg.Inline != nil || s.cur.Load() != nil {
		return nil
	}
	_, err := s.refresh(ctx)
	return err
}

// refresh fetches a new set unless one was attempted less than
// MinRefreshInterval ago. Concurrent callers share one fetch. It returns
// the current set (the new one, or the last good one) and the fetch error.
func (s *Source) refresh(ctx context.Context) (*set, error) {
	v, err, _ := s.sf.Do("", func() (any, error) {
		now := s.cfg.TimeNow()
		s.mu.Lock()
		if !s.lastAttempt.IsZero() && now.Sub(s.lastAttempt) < s.cfg.MinRefreshInterval {
			s.mu.Unlock()
			return s.cur.Load(), nil
		}
		s.lastAttempt = now
		s.mu.Unlock()
		// The fetch outlives the request that triggered it: others share it.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.FetchTimeout)
		defer cancel()
		ks, err := s.fetch(fctx)
		if err != nil {
			s.report("error")
			return s.cur.Load(), err
		}
		s.report("ok")
		next := index(ks, now)
		old := s.cur.Swap(next)
		if old != nil && old.raw != next.raw && s.cfg.OnChange != nil {
			s.cfg.OnChange()
		}
		return next, nil
	})
	st, _ := v.(*set)
	return st, err
}

func (s *Source) report(result string) {
	if s.cfg.OnFetch != nil {
		s.cfg.OnFetch(result)
	}
}

func (s *Source) fetch(ctx context.Context) (*jose.JSONWebKeySet, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.URI, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: status %d", ErrFetch, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	if len(b) > MaxBodyBytes {
		return nil, fmt.Errorf("%w: body over %d bytes", ErrFetch, MaxBodyBytes)
	}
	ks, err := policy.ParseJWKS(b)
	if err != nil {
		return nil, errors.Join(ErrFetch, err)
	}
	return ks, nil
}
