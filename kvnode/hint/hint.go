// Package hint is hinted handoff: when a replica misses a write (down, or
// it failed or timed out), the coordinator stores the write durably as a
// hint for it and replays it, throttled, once the replica is alive again.
// Hints older than the window are dropped: a longer outage is anti-entropy's
// job. Hints never count towards a write's W (strict quorum).
package hint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/portico-io/portico/kvnode/storage"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// Defaults for Config.
const (
	DefaultWindow   = 3 * time.Hour
	DefaultInterval = time.Second
	DefaultBatch    = 128
	DefaultPerPass  = 2048
)

// Sender delivers hinted entries to their replica.
type Sender interface {
	SendHints(ctx context.Context, target string, entries []*kvv1.Entry) error
}

// Liveness says whether a replica is worth replaying to.
type Liveness interface {
	Alive(id string) bool
	// Left reports that id left the ring for good (decommissioned, or
	// replaced while down): its hints are dropped, never replayed. Its
	// data reached the nodes that own it now (the leaving node handed its
	// ranges over; a replacement streamed them from the live replicas).
	Left(id string) bool
}

// Config configures New. Zero values take the defaults.
type Config struct {
	// Window is how long a hint is kept (default 3h).
	Window time.Duration
	// Interval between replay passes (default 1s).
	Interval time.Duration
	// Batch is the number of hints sent per call (default 128).
	Batch int
	// PerPass caps hints replayed per target per pass: the throttle
	// (default 2048, so ~2k hints/s per target at the default interval).
	PerPass int
	// Timeout bounds one batch delivery (default 5s).
	Timeout time.Duration
	Now     func() time.Time
	Logger  *slog.Logger
	// OnPass, when set, is called after every replay pass (test signal).
	OnPass func()
}

// Hints is safe for concurrent use.
type Hints struct {
	cfg      Config
	st       *storage.Store
	mu       sync.Mutex
	pending  map[string]int
	Stored   atomic.Int64
	Replayed atomic.Int64
	Expired  atomic.Int64
}

// New loads pending counts from st.
func New(st *storage.Store, cfg Config) (*Hints, error) {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.PerPass <= 0 {
		cfg.PerPass = DefaultPerPass
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p, err := st.HintTargets()
	if err != nil {
		return nil, err
	}
	return &Hints{cfg: cfg, st: st, pending: p}, nil
}

// Add durably stores e for target.
func (h *Hints) Add(target string, e *kvv1.Entry) error {
	b, err := proto.Marshal(e)
	if err != nil {
		return fmt.Errorf("hint: encode: %w", err)
	}
	if err := h.st.PutHint(target, h.cfg.Now(), b); err != nil {
		return err
	}
	h.mu.Lock()
	h.pending[target]++
	h.mu.Unlock()
	h.Stored.Add(1)
	return nil
}

// Pending returns the number of stored hints per target.
func (h *Hints) Pending() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]int, len(h.pending))
	for k, v := range h.pending {
		if v > 0 {
			out[k] = v
		}
	}
	return out
}

// PendingTotal is the number of stored hints.
func (h *Hints) PendingTotal() int {
	n := 0
	for _, v := range h.Pending() {
		n += v
	}
	return n
}

// Run replays every Interval until ctx ends.
func (h *Hints) Run(ctx context.Context, s Sender, live Liveness) {
	t := time.NewTicker(h.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := h.ReplayOnce(ctx, s, live); err != nil && !errors.Is(err, context.Canceled) {
			h.cfg.Logger.Warn("kvnode: hint replay", "err", err)
		}
		if h.cfg.OnPass != nil {
			h.cfg.OnPass()
		}
	}
}

// ReplayOnce drops expired hints and those of targets that left, and sends
// up to PerPass hints to each alive target, deleting each batch once
// delivered.
func (h *Hints) ReplayOnce(ctx context.Context, s Sender, live Liveness) error {
	var errs []error
	for target := range h.Pending() {
		if live.Left(target) {
			if n, err := h.Drop(target); err != nil {
				errs = append(errs, fmt.Errorf("hint: dropping the hints of %s, which left: %w", target, err))
			} else if n > 0 {
				h.cfg.Logger.Info("kvnode: dropped the hints of a member that left the ring", "member", target, "hints", n)
			}
			continue
		}
		if err := h.replayTarget(ctx, s, target, live.Alive(target)); err != nil {
			errs = append(errs, fmt.Errorf("hint: replay to %s: %w", target, err))
		}
	}
	return errors.Join(errs...)
}

func (h *Hints) replayTarget(ctx context.Context, s Sender, target string, alive bool) error {
	cutoff := h.cfg.Now().Add(-h.cfg.Window)
	sent := 0
	for sent < h.cfg.PerPass {
		var batch []storage.Hint
		var expired [][]byte
		err := h.st.Hints(target, func(hn storage.Hint) bool {
			if hn.Created.Before(cutoff) {
				expired = append(expired, hn.StorageKey)
				return true
			}
			if !alive {
				return true // only expiring this pass
			}
			batch = append(batch, hn)
			return len(batch) < h.cfg.Batch
		})
		if err != nil {
			return err
		}
		if len(expired) > 0 {
			if err := h.st.DeleteHints(expired); err != nil {
				return err
			}
			h.Expired.Add(int64(len(expired)))
			h.done(target, len(expired))
		}
		if len(batch) == 0 {
			return nil
		}
		entries := make([]*kvv1.Entry, 0, len(batch))
		keys := make([][]byte, 0, len(batch))
		for _, hn := range batch {
			var e kvv1.Entry
			if err := proto.Unmarshal(hn.Payload, &e); err != nil {
				h.cfg.Logger.Error("kvnode: dropping corrupt hint", "target", target, "err", err)
			} else {
				entries = append(entries, &e)
			}
			keys = append(keys, hn.StorageKey)
		}
		cctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
		err = s.SendHints(cctx, target, entries)
		cancel()
		if err != nil {
			return err
		}
		if err := h.st.DeleteHints(keys); err != nil {
			return err
		}
		h.Replayed.Add(int64(len(entries)))
		h.done(target, len(keys))
		sent += len(batch)
	}
	return nil
}

// Drop deletes every hint held for target (a member that left the ring)
// and returns how many it deleted.
func (h *Hints) Drop(target string) (int, error) {
	var keys [][]byte
	if err := h.st.Hints(target, func(hn storage.Hint) bool {
		keys = append(keys, hn.StorageKey)
		return true
	}); err != nil {
		return 0, err
	}
	if len(keys) == 0 {
		return 0, nil
	}
	if err := h.st.DeleteHints(keys); err != nil {
		return 0, err
	}
	h.done(target, len(keys))
	return len(keys), nil
}

func (h *Hints) done(target string, n int) {
	h.mu.Lock()
	h.pending[target] -= n
	if h.pending[target] <= 0 {
		delete(h.pending, target)
	}
	h.mu.Unlock()
}
