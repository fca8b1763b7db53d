// Package httptarget is the HTTP executor: it calls a job's URL with the
// templated payload and Idempotency-Key {jobId}:{scheduledAt}, dialling
// only addresses the SSRF guard allows, and keeps one circuit breaker per
// target host (scheme://host:port) in this process.
//
// Breaker policy: BreakerFailures consecutive retryable failures
// (transport errors, timeouts, 429, 5xx) open a host's circuit; 2xx and
// non-retryable 4xx count as the host being healthy. While open, attempts
// are Deferred — the run goes back to RETRY_WAIT for the remaining open
// delay plus up to 50% jitter, without using an attempt, so a dead host
// cannot exhaust every job's retries. After BreakerDelay the circuit
// half-opens and lets BreakerSuccesses trial calls through; that many
// successes close it, one failure re-opens it.
package httptarget

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"

	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/secret"
	"github.com/portico-io/portico/scheduler/target"
)

// Defaults for zero Config fields.
const (
	DefaultBreakerFailures  = 5
	DefaultBreakerDelay     = 30 * time.Second
	DefaultBreakerSuccesses = 2
	// DefaultMaxBreakers bounds the per-host breakers kept in memory.
	DefaultMaxBreakers = 10000
)

// Config configures the HTTP target.
type Config struct {
	// Guard checks every dialled address (required unless Client is set).
	Guard *jobspec.Guard
	// Client overrides the HTTP client (it must enforce the allowlist).
	Client           *http.Client
	BreakerFailures  uint
	BreakerDelay     time.Duration
	BreakerSuccesses uint
	// MaxBreakers bounds the hosts with a breaker (default
	// DefaultMaxBreakers): jobs name arbitrary URLs, so the map must not
	// grow with every host ever called. At the bound, the least recently
	// used closed breaker is dropped (it only forgets a partial failure
	// count); open and half-open ones are kept unless every one is.
	MaxBreakers int
	// Secrets resolves target.http.secretRef at call time, for the job's
	// tenant and URL only (nil: a job with a secretRef fails its attempt
	// as Fatal).
	Secrets *secret.Dir
	// OnBreakerState, when set, is told of every host circuit transition
	// (metrics, tests). It must not block.
	OnBreakerState func(host string, state circuitbreaker.State)
}

// Target is the HTTP executor; safe for concurrent use.
type Target struct {
	cfg      Config
	mu       sync.Mutex
	breakers map[string]*hostBreaker
}

// hostBreaker is one host's breaker and when it was last asked for.
type hostBreaker struct {
	cb   circuitbreaker.CircuitBreaker[any]
	used time.Time
}

var (
	_ target.Target    = (*Target)(nil)
	_ target.Validator = (*Target)(nil)
)

// New validates cfg and fills defaults.
func New(cfg Config) (*Target, error) {
	if cfg.Client == nil {
		if cfg.Guard == nil {
			return nil, errors.New("httptarget: Guard is required")
		}
		cfg.Client = &http.Client{
			Transport: &http.Transport{DialContext: cfg.Guard.DialContext, MaxIdleConnsPerHost: 16,
				IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second},
			// Redirects are not followed: a 3xx is a failed delivery.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if cfg.BreakerFailures == 0 {
		cfg.BreakerFailures = DefaultBreakerFailures
	}
	if cfg.BreakerDelay <= 0 {
		cfg.BreakerDelay = DefaultBreakerDelay
	}
	if cfg.BreakerSuccesses == 0 {
		cfg.BreakerSuccesses = DefaultBreakerSuccesses
	}
	if cfg.MaxBreakers <= 0 {
		cfg.MaxBreakers = DefaultMaxBreakers
	}
	return &Target{cfg: cfg, breakers: map[string]*hostBreaker{}}, nil
}

// Validate accepts HTTP targets (jobspec validates their fields).
func (t *Target) Validate(tg *jobspec.Target) error { return nil }

// hostKey is the breaker key of a URL: scheme://host:port.
func hostKey(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return u.Scheme + "://" + u.Hostname() + ":" + port
}

func (t *Target) breaker(host string) circuitbreaker.CircuitBreaker[any] {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if hb, ok := t.breakers[host]; ok {
		hb.used = now
		return hb.cb
	}
	if len(t.breakers) >= t.cfg.MaxBreakers {
		t.evictLocked()
	}
	b := circuitbreaker.NewBuilder[any]().
		WithFailureThreshold(t.cfg.BreakerFailures).
		WithDelay(t.cfg.BreakerDelay).
		WithSuccessThreshold(t.cfg.BreakerSuccesses)
	if f := t.cfg.OnBreakerState; f != nil {
		b = b.OnStateChanged(func(e circuitbreaker.StateChangedEvent) { f(host, e.NewState) })
	}
	cb := b.Build()
	t.breakers[host] = &hostBreaker{cb: cb, used: now}
	return cb
}

// evictLocked drops the least recently used closed breaker, or the least
// recently used one when none is closed.
func (t *Target) evictLocked() {
	var oldest, oldestClosed string
	for host, hb := range t.breakers {
		if oldest == "" || hb.used.Before(t.breakers[oldest].used) {
			oldest = host
		}
		if hb.cb.IsClosed() && (oldestClosed == "" || hb.used.Before(t.breakers[oldestClosed].used)) {
			oldestClosed = host
		}
	}
	if oldestClosed != "" {
		oldest = oldestClosed
	}
	delete(t.breakers, oldest)
}

// Breakers is the number of hosts with a breaker in memory.
func (t *Target) Breakers() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.breakers)
}

// State reports the circuit state of the host serving url (closed when
// never called or forgotten).
func (t *Target) State(rawURL string) circuitbreaker.State {
	t.mu.Lock()
	hb, ok := t.breakers[hostKey(rawURL)]
	t.mu.Unlock()
	if !ok {
		return circuitbreaker.ClosedState
	}
	return hb.cb.State()
}

// Deliver makes one HTTP call under the host's circuit breaker.
func (t *Target) Deliver(ctx context.Context, d target.Delivery) target.Result {
	h := d.Spec.Target.HTTP
	if h == nil {
		return target.Result{Outcome: target.Fatal, Message: "no HTTP target"}
	}
	// The secret is read per attempt (rotation needs no restart) and
	// before the breaker: a missing secret says nothing about the host.
	var secretValue string
	if ref := h.SecretRef; ref != nil {
		v, err := t.cfg.Secrets.Resolve(d.Spec.Tenant, ref.Name, h.URL)
		if err != nil {
			return target.Result{Outcome: target.Fatal, Message: fmt.Sprintf("SECRET_UNAVAILABLE: target.http.secretRef %q: %v", ref.Name, err)}
		}
		secretValue = v
	}
	host := hostKey(h.URL)
	cb := t.breaker(host)
	if !cb.TryAcquirePermit() {
		wait := cb.RemainingDelay()
		if wait <= 0 { // half-open with every trial permit taken
			wait = t.cfg.BreakerDelay / 10
		}
		wait += time.Duration(rand.Int64N(int64(wait)/2 + 1))
		return target.Result{Outcome: target.Deferred, RetryAfter: wait,
			Message: fmt.Sprintf("circuit open for %s; deferred %s without using an attempt", host, wait.Round(time.Millisecond))}
	}
	res := t.call(ctx, d, h, secretValue)
	if secretValue != "" {
		// A target may echo the header back in an error body, which would
		// land in the run record and logs.
		res.Message = strings.ReplaceAll(res.Message, secretValue, "[REDACTED]")
	}
	switch {
	case res.Outcome == target.Retryable && ctx.Err() != nil && !errors.Is(context.Cause(ctx), context.DeadlineExceeded):
		// Our own cancellation (lost lease, cancelled run, shutdown) says
		// nothing about the host, but a permit must be given back.
		if cb.IsHalfOpen() {
			cb.RecordFailure()
		}
	case res.Outcome == target.Retryable:
		cb.RecordFailure()
	default:
		cb.RecordSuccess()
	}
	return res
}

func (t *Target) call(ctx context.Context, d target.Delivery, h *jobspec.HTTPTarget, secretValue string) target.Result {
	req, err := http.NewRequestWithContext(ctx, h.Method, h.URL, bytes.NewReader(d.Payload()))
	if err != nil {
		return target.Result{Outcome: target.Fatal, Message: err.Error()}
	}
	for k, v := range h.Headers {
		req.Header.Set(k, v)
	}
	if ref := h.SecretRef; ref != nil {
		req.Header.Set(ref.Header, ref.Prefix+secretValue)
	}
	if len(d.Spec.Target.Payload) > 0 && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Idempotency-Key", d.IdempotencyKey())
	req.Header.Set("X-Portico-Job-Id", strconv.FormatInt(d.JobID, 10))
	req.Header.Set("X-Portico-Attempt", strconv.Itoa(d.Attempt))
	resp, err := t.cfg.Client.Do(req)
	if err != nil {
		if errors.Is(err, jobspec.ErrForbiddenTarget) {
			return target.Result{Outcome: target.Fatal, Message: err.Error()}
		}
		return target.Result{Outcome: target.Retryable, Message: err.Error()}
	}
	defer resp.Body.Close()
	if c := resp.StatusCode; c >= 200 && c < 300 {
		// Drained (up to 1 MiB) so the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return target.Result{Outcome: target.Succeeded}
	}
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	msg := fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(snippet))
	if c := resp.StatusCode; c == http.StatusTooManyRequests || c == http.StatusRequestTimeout || c >= 500 {
		return target.Result{Outcome: target.Retryable, Message: msg}
	}
	return target.Result{Outcome: target.Fatal, Message: msg}
}
