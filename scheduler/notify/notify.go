// Package notify delivers the scheduler's failure and dead-letter
// webhooks from the notification outbox (scheduler.notification_outbox).
// Rows are written in the same statement that fails a run, so a crash
// never loses one; the Notifier claims due rows under a visibility lease,
// POSTs a JSON event through the SSRF guard with a per-call timeout, and
// retries with full-jitter backoff up to MaxAttempts. Delivery is
// at-least-once; each event carries Idempotency-Key "notification:{id}".
//
// Sending is asynchronous and bounded: at most Concurrency calls are in
// flight per Notifier and a slow webhook never blocks a worker.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/store"
)

// Defaults for zero Config fields.
const (
	DefaultPoll           = time.Second
	DefaultConcurrency    = 8
	DefaultTimeout        = 10 * time.Second
	DefaultMaxAttempts    = 8
	DefaultInitialBackoff = time.Second
	DefaultMaxBackoff     = 5 * time.Minute
)

// Store is what a Notifier needs from the store.
type Store interface {
	ClaimNotifications(ctx context.Context, n int, lease time.Duration) ([]store.Notification, error)
	NotificationSent(ctx context.Context, id int64, attempt int) error
	NotificationFailed(ctx context.Context, id int64, attempt int, retryIn time.Duration, final bool, msg string) error
}

var _ Store = (*store.Store)(nil)

// Config configures a Notifier.
type Config struct {
	Store Store // required
	// Guard checks every address dialled (required unless Client is set).
	Guard *jobspec.Guard
	// Client overrides the HTTP client (it must enforce the allowlist).
	Client         *http.Client
	Poll           time.Duration
	Concurrency    int
	Timeout        time.Duration // per call; the claim lease is 2×Timeout
	MaxAttempts    int
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// Sent counts deliveries by result ("sent", "retry", "failed"); nil
	// means unregistered.
	Sent   *prometheus.CounterVec
	Logger *slog.Logger
}

// Notifier is a long-running delivery loop; many may share one database.
type Notifier struct {
	cfg  Config
	wake chan struct{}
}

// New validates cfg and fills defaults.
func New(cfg Config) (*Notifier, error) {
	if cfg.Store == nil {
		return nil, errors.New("notify: Store is required")
	}
	if cfg.Client == nil {
		if cfg.Guard == nil {
			return nil, errors.New("notify: Guard is required")
		}
		cfg.Client = &http.Client{
			Transport:     &http.Transport{DialContext: cfg.Guard.DialContext, MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.Poll, DefaultPoll)
	def(&cfg.Timeout, DefaultTimeout)
	def(&cfg.InitialBackoff, DefaultInitialBackoff)
	def(&cfg.MaxBackoff, DefaultMaxBackoff)
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.Sent == nil {
		cfg.Sent = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "unregistered"}, []string{"result"})
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Notifier{cfg: cfg, wake: make(chan struct{}, 1)}, nil
}

// Run delivers notifications until ctx is done; calls in flight are
// abandoned on shutdown (their rows come back after the lease).
func (n *Notifier) Run(ctx context.Context) error {
	sem := make(chan struct{}, n.cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(n.cfg.Poll)
	defer t.Stop()
	for {
		free := cap(sem) - len(sem)
		if free > 0 {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			batch, err := n.cfg.Store.ClaimNotifications(cctx, free, 2*n.cfg.Timeout)
			cancel()
			if err != nil && ctx.Err() == nil {
				n.cfg.Logger.Error("notify: claim failed", "err", err)
			}
			for _, x := range batch {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() {
						<-sem
						select {
						case n.wake <- struct{}{}:
						default:
						}
					}()
					n.Deliver(ctx, x)
				})
			}
			if len(batch) == free {
				continue
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-n.wake:
		}
	}
}

// Event is the JSON body POSTed to a webhook.
type Event struct {
	Event          string    `json:"event"`
	NotificationID string    `json:"notificationId"`
	JobID          string    `json:"jobId"`
	RunID          string    `json:"runId"`
	Tenant         string    `json:"tenant"`
	ScheduledAt    time.Time `json:"scheduledAt"`
	Attempt        int       `json:"attempt"`
	Error          string    `json:"error,omitempty"`
	IdempotencyKey string    `json:"idempotencyKey"`
}

// Deliver makes one delivery attempt and records its result (exported for
// tests that drive a claimed row directly).
func (n *Notifier) Deliver(ctx context.Context, x store.Notification) {
	err := n.post(ctx, x)
	if ctx.Err() != nil {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var result string
	var werr error
	switch {
	case err == nil:
		result, werr = "sent", n.cfg.Store.NotificationSent(wctx, x.ID, x.Attempt)
	default:
		final := x.Attempt >= n.cfg.MaxAttempts || errors.Is(err, jobspec.ErrForbiddenTarget)
		result = "retry"
		if final {
			result = "failed"
		}
		werr = n.cfg.Store.NotificationFailed(wctx, x.ID, x.Attempt, n.backoff(x.Attempt), final, err.Error())
		n.cfg.Logger.Warn("notify: webhook delivery failed", "notification", x.ID, "attempt", x.Attempt, "final", final, "err", err)
	}
	if werr != nil {
		n.cfg.Logger.Warn("notify: result not recorded", "notification", x.ID, "err", werr)
		return
	}
	n.cfg.Sent.WithLabelValues(result).Inc()
}

// backoff is full jitter over min(MaxBackoff, InitialBackoff·2^(attempt−1)).
func (n *Notifier) backoff(attempt int) time.Duration {
	ceiling := min(n.cfg.MaxBackoff, n.cfg.InitialBackoff<<min(attempt-1, 30))
	if ceiling <= 0 {
		ceiling = n.cfg.MaxBackoff
	}
	return time.Duration(rand.Int64N(int64(ceiling) + 1))
}

func (n *Notifier) post(ctx context.Context, x store.Notification) error {
	ev := Event{Event: x.Event, NotificationID: strconv.FormatInt(x.ID, 10), JobID: strconv.FormatInt(x.ScheduleID, 10),
		RunID: strconv.FormatInt(x.RunID, 10), Tenant: x.Tenant, ScheduledAt: x.ScheduledAt.UTC(), Attempt: x.RunAttempt,
		IdempotencyKey: jobspec.IdempotencyKey(x.ScheduleID, x.ScheduledAt)}
	if x.Error != nil {
		ev.Error = *x.Error
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, x.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "notification:"+strconv.FormatInt(x.ID, 10))
	resp, err := n.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("webhook answered HTTP %d", resp.StatusCode)
	}
	return nil
}
