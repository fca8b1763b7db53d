package repl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portico-io/portico/cachenode/bus"
	"github.com/portico-io/portico/cachenode/namespace"
)

// FollowerConfig configures a Follower.
type FollowerConfig struct {
	// Registry receives the primary's data. Its namespaces should match
	// the primary's: records for a namespace it lacks are dropped (and
	// logged once per sync).
	Registry *namespace.Registry
	// Bus is how the follower reaches its primary's bus port (TLS, secret).
	Bus bus.Peer
	// Announce is this node's address as the primary's INFO should list it
	// (host:port of its RESP port); empty lists the connection's address.
	Announce string
	// Logger defaults to slog.Default(); Metrics to unregistered ones.
	Logger  *slog.Logger
	Metrics *Metrics
	// Timeout: a link that brings nothing (not even a ping) for this long
	// is dropped and redialed (default DefaultTimeout).
	Timeout time.Duration
	// AckInterval is how often the applied offset is acknowledged
	// (default 1s).
	AckInterval time.Duration
	// MinBackoff and MaxBackoff bound the wait between reconnects
	// (default 100ms and 5s), doubling after each failed attempt.
	MinBackoff, MaxBackoff time.Duration
	// OnSynced, when set, is called each time the replica is in sync with
	// its primary: after a full sync has been applied and caught up
	// (full=true), or when a partial resync is accepted (full=false).
	OnSynced func(full bool)
	// OnApplied, when set, is called with the applied offset after every
	// frame (tests wait on it); it must be fast.
	OnApplied func(offset int64)
	// Stored, when set, is called after each applied record that stored a
	// key (not deletions or flushes), in the follower's goroutine with no
	// lock held: the node serves the clients blocked on the key, as Redis
	// does after each command its master sends. It must be fast when
	// nothing waits.
	Stored func(ns string, key []byte)
}

// Follower keeps a replica's registry a copy of a primary's: it applies the
// primary's stream, reconnects with backoff, and asks to continue from its
// offset before accepting a full resync. Safe for concurrent use.
type Follower struct {
	cfg FollowerConfig
	log *slog.Logger
	m   *Metrics
	ack atomic.Int64 // applied offset, for the ack sender

	run sync.Mutex // serializes Follow and Stop
	mu  sync.Mutex // guards the fields below
	st  FollowerStatus
	// consistent: the data equals the primary's at st.Offset under
	// st.ReplID, so the next session may ask to continue.
	consistent bool
	cancel     context.CancelFunc
	done       chan struct{}
}

// FollowerStatus is a replica's view of its link.
type FollowerStatus struct {
	// Primary is the bus address followed ("" when not following).
	Primary string
	// LinkUp: connected and in sync (not in the middle of a full sync).
	LinkUp bool
	// Syncing: a full sync is in progress.
	Syncing bool
	// Offset is the stream offset applied; ReplID the primary's id.
	Offset int64
	ReplID string
	// PrimaryOffset is the primary's offset from its last ping.
	PrimaryOffset int64
	// LastIO is when the primary was last heard from.
	LastIO                  time.Time
	FullSyncs, PartialSyncs int64
}

// NewFollower returns an idle Follower.
func NewFollower(cfg FollowerConfig) *Follower {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.AckInterval <= 0 {
		cfg.AckInterval = time.Second
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(cfg.MinBackoff, 5*time.Second)
	}
	f := &Follower{cfg: cfg, log: cfg.Logger, m: cfg.Metrics}
	if f.log == nil {
		f.log = slog.Default()
	}
	if f.m == nil {
		f.m = nopMetrics()
	}
	return f
}

// Follow replicates from the primary whose bus port is at addr, replacing
// any primary followed before. It returns at once; the link runs until
// Stop, the next Follow or until ctx is done.
func (f *Follower) Follow(ctx context.Context, addr string) {
	f.run.Lock()
	defer f.run.Unlock()
	f.stop()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	f.mu.Lock()
	f.st.Primary, f.cancel, f.done = addr, cancel, done
	f.mu.Unlock()
	go func() {
		defer close(done)
		f.loop(ctx, addr)
	}()
}

// Stop stops following and waits for the link to close. The data stays.
func (f *Follower) Stop() {
	f.run.Lock()
	defer f.run.Unlock()
	f.stop()
}

func (f *Follower) stop() {
	f.mu.Lock()
	cancel, done := f.cancel, f.done
	f.cancel, f.done = nil, nil
	f.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
	f.mu.Lock()
	f.st.Primary, f.st.LinkUp, f.st.Syncing = "", false, false
	f.mu.Unlock()
	f.m.linkUp.Set(0)
}

// Status is the current link state.
func (f *Follower) Status() FollowerStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

func (f *Follower) loop(ctx context.Context, addr string) {
	backoff := f.cfg.MinBackoff
	log := f.log.With("primary", addr)
	for {
		synced, err := f.session(ctx, addr, log)
		f.mu.Lock()
		wasUp := f.st.LinkUp
		f.st.LinkUp, f.st.Syncing = false, false
		f.mu.Unlock()
		f.m.linkUp.Set(0)
		if ctx.Err() != nil {
			return
		}
		if wasUp || synced {
			log.Warn("repl: link to primary lost", "err", err)
			backoff = f.cfg.MinBackoff
		} else {
			log.Debug("repl: cannot sync with primary", "err", err, "retry_in", backoff)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, f.cfg.MaxBackoff)
	}
}

// session is one connection: handshake, optional snapshot, stream. It
// reports whether it got in sync before it ended.
func (f *Follower) session(ctx context.Context, addr string, log *slog.Logger) (synced bool, err error) {
	dctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	cl, err := f.cfg.Bus.Dial(dctx, addr)
	if err != nil {
		return false, err
	}
	defer cl.Close()
	stop := context.AfterFunc(ctx, func() { cl.Close() })
	defer stop()

	f.mu.Lock()
	replid, off := "?", int64(-1)
	if f.consistent {
		replid, off = f.st.ReplID, f.st.Offset
	}
	f.mu.Unlock()
	r, err := cl.Do(dctx, []byte("SYNC"), []byte(replid), []byte(strconv.FormatInt(off, 10)), []byte(f.cfg.Announce))
	if err != nil {
		return false, err
	}
	word := strings.Fields(string(r.Str))
	var a *applier
	switch {
	case r.Kind == bus.KindSimple && len(word) == 2 && word[0] == "CONTINUE" && word[1] == replid:
		a = newApplier(f.cfg.Registry, f.m, log, off, false)
		a.stored = f.cfg.Stored
		f.m.partial.WithLabelValues("replica").Inc()
		f.mu.Lock()
		f.st.PartialSyncs++
		f.st.LinkUp, f.st.LastIO = true, time.Now()
		f.mu.Unlock()
		f.m.linkUp.Set(1)
		log.Info("repl: partial resync", "offset", off)
		synced = true
		if f.cfg.OnSynced != nil {
			f.cfg.OnSynced(false)
		}
	case r.Kind == bus.KindSimple && len(word) == 3 && word[0] == "FULLRESYNC":
		x, perr := strconv.ParseInt(word[2], 10, 64)
		if perr != nil || x < 0 {
			return false, fmt.Errorf("%w: %q", ErrStream, r.Str)
		}
		// The data no longer matches any offset until the snapshot has
		// been applied and the stream caught up.
		f.mu.Lock()
		f.consistent = false
		f.st.ReplID, f.st.Offset, f.st.Syncing = word[1], x, true
		f.mu.Unlock()
		log.Info("repl: full sync started", "replid", word[1], "offset", x)
		for _, ns := range f.cfg.Registry.All() {
			ns.DB.Flush()
		}
		a = newApplier(f.cfg.Registry, f.m, log, x, true)
		a.stored = f.cfg.Stored
		off = x
	default:
		return false, fmt.Errorf("%w: SYNC replied %q", ErrStream, r.String())
	}
	f.ack.Store(off)

	ackDone := make(chan struct{})
	sctx, scancel := context.WithCancel(ctx)
	go func() {
		defer close(ackDone)
		f.sendAcks(sctx, cl)
	}()
	defer func() { scancel(); cl.Close(); <-ackDone }()

	t0 := time.Now()
	fr := &frameReader{br: cl.Reader()}
	for {
		if err := cl.SetReadDeadline(time.Now().Add(f.cfg.Timeout)); err != nil {
			return synced, err
		}
		tag, p, err := fr.next()
		if err != nil {
			return synced, err
		}
		wasConsistent := a.consistent()
		if err := a.frame(tag, p); err != nil {
			return synced, err
		}
		f.ack.Store(a.off)
		f.mu.Lock()
		f.st.Offset, f.st.PrimaryOffset, f.st.LastIO = a.off, a.primary, time.Now()
		done := !wasConsistent && a.consistent()
		if done {
			f.consistent, f.st.Syncing, f.st.LinkUp = true, false, true
			f.st.FullSyncs++
		}
		f.mu.Unlock()
		if f.cfg.OnApplied != nil {
			f.cfg.OnApplied(a.off)
		}
		if done {
			synced = true
			f.m.linkUp.Set(1)
			f.m.fullSyncs.WithLabelValues("replica").Inc()
			log.Info("repl: full sync done", "offset", a.off, "took", time.Since(t0).Round(time.Millisecond))
			if f.cfg.OnSynced != nil {
				f.cfg.OnSynced(true)
			}
		}
	}
}

// sendAcks acknowledges the applied offset every AckInterval.
func (f *Follower) sendAcks(ctx context.Context, cl *bus.Client) {
	t := time.NewTicker(f.cfg.AckInterval)
	defer t.Stop()
	for {
		if err := cl.Send([]byte("REPLCONF"), []byte("ACK"), []byte(strconv.FormatInt(f.ack.Load(), 10))); err != nil {
			if !errors.Is(err, context.Canceled) {
				cl.Close() // let the reader see the broken link
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
