package topology

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portico-io/portico/cachenode/cluster"
)

// Syncer keeps a node's cluster.State in step with the stored topology:
// Load waits for a map that lists the node, Run follows the key with a
// watch and installs every change through State.Swap (which refuses a map
// that does not raise the epoch). Every CheckInterval it also reads the key
// (a linearizable read through the Raft leader): that read is what proves
// the store reachable (a watch on a cut-off follower stays open and
// silent), and it installs a newer map a lagging watch has not delivered.
// When the store is unreachable the node keeps its last map; Status says
// how stale it may be.
type Syncer struct {
	Client *Client
	SelfID string
	// CheckInterval is the period of the confirming read (default 5 s);
	// StaleAfter is how long without a successful read or watch event
	// makes the map stale (default 3 × CheckInterval).
	CheckInterval time.Duration
	StaleAfter    time.Duration
	Logger        *slog.Logger
	// OnApply, when set, is called after each stored change was installed
	// (err nil) or refused (a test signal).
	OnApply func(epoch uint64, err error)

	state       *cluster.State
	mu          sync.Mutex // serializes apply
	rev         atomic.Uint64
	lastContact atomic.Int64 // unix nanoseconds
	lastErr     atomic.Pointer[string]
	watching    atomic.Bool
}

// Status is what the node reports about its topology source.
type Status struct {
	Epoch    uint64
	Revision uint64
	// LastContact is the last successful read or watch event.
	LastContact time.Time
	Stale       bool
	Watching    bool
	// Err is the last failure (empty after a success).
	Err string
}

func (s *Syncer) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

func (s *Syncer) checkInterval() time.Duration {
	if s.CheckInterval > 0 {
		return s.CheckInterval
	}
	return 5 * time.Second
}

func (s *Syncer) staleAfter() time.Duration {
	if s.StaleAfter > 0 {
		return s.StaleAfter
	}
	return 3 * s.checkInterval()
}

func (s *Syncer) contact() {
	s.lastContact.Store(time.Now().UnixNano())
	s.lastErr.Store(nil)
}

func (s *Syncer) fail(err error) {
	msg := err.Error()
	s.lastErr.Store(&msg)
}

// Load waits until the store holds a map listing this node (retrying every
// second, logging why) and returns the State it seeds; it fails only when
// ctx ends or the client is misconfigured.
func (s *Syncer) Load(ctx context.Context) (*cluster.State, error) {
	if err := s.Client.Validate(); err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		t, err := s.Client.Load(ctx)
		var m *cluster.Map
		if err == nil {
			s.contact()
			m, err = t.Spec.Map(s.SelfID)
		}
		if err == nil {
			s.state = cluster.NewState(m)
			s.rev.Store(t.Revision)
			return s.state, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.fail(err)
		if attempt%10 == 0 {
			s.log().Warn("waiting for the cluster topology", "cluster", s.Client.Cluster, "key", s.Client.Key(), "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// State is the State Load returned.
func (s *Syncer) State() *cluster.State { return s.state }

// Status reports the source's health; safe for concurrent use.
func (s *Syncer) Status() Status {
	st := Status{Revision: s.rev.Load(), Watching: s.watching.Load()}
	if s.state != nil {
		st.Epoch = s.state.Load().Epoch
	}
	if n := s.lastContact.Load(); n > 0 {
		st.LastContact = time.Unix(0, n)
		st.Stale = time.Since(st.LastContact) > s.staleAfter()
	}
	if e := s.lastErr.Load(); e != nil {
		st.Err = *e
	}
	return st
}

// apply installs u unless a later revision was already seen.
func (s *Syncer) apply(u Update) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u.Revision <= s.rev.Load() {
		return
	}
	s.rev.Store(u.Revision)
	var err error
	switch {
	case u.Deleted:
		err = errors.New("topology: the stored topology was deleted")
	case u.Err != nil:
		err = u.Err
	default:
		var m *cluster.Map
		if m, err = u.Spec.Map(s.SelfID); err == nil {
			err = s.state.Swap(m)
		}
	}
	if err != nil {
		s.log().Error("stored cluster topology refused; keeping the current slot map", "revision", u.Revision, "epoch", u.Spec.Epoch, "err", err)
	} else {
		s.log().Info("cluster topology installed", "revision", u.Revision, "epoch", u.Spec.Epoch)
	}
	if s.OnApply != nil {
		s.OnApply(u.Spec.Epoch, err)
	}
}

// Run follows the stored topology until ctx is done. Load must have
// succeeded.
func (s *Syncer) Run(ctx context.Context) error {
	if s.state == nil {
		return errors.New("topology: Syncer.Run before Load")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.checkLoop(ctx)
	}()
	err := s.Client.Watch(ctx, s.rev.Load()+1, func(u Update) error {
		s.contact()
		s.apply(u)
		return nil
	}, WatchHooks{
		Connected: func(string) { s.watching.Store(true) },
		Disconnected: func(addr string, err error) {
			s.watching.Store(false)
			s.fail(fmt.Errorf("watch on %s: %w", addr, err))
			s.log().Warn("cluster topology watch broken; reconnecting", "addr", addr, "err", err)
		},
	})
	<-done
	return err
}

func (s *Syncer) checkLoop(ctx context.Context) {
	t := time.NewTicker(s.checkInterval())
	defer t.Stop()
	wasStale := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, s.checkInterval())
		cur, err := s.Client.Load(rctx)
		cancel()
		switch {
		case err == nil:
			s.contact()
			s.apply(Update{Revision: cur.Revision, Raw: cur.Raw, Spec: cur.Spec})
		case errors.Is(err, ErrNotFound):
			s.contact()
		case ctx.Err() != nil:
			return
		default:
			s.fail(err)
		}
		if stale := s.Status().Stale; stale != wasStale {
			wasStale = stale
			if stale {
				s.log().Error("cluster topology store unreachable; serving the last slot map", "epoch", s.state.Load().Epoch, "err", err)
			} else {
				s.log().Info("cluster topology store reachable again", "epoch", s.state.Load().Epoch)
			}
		}
	}
}
