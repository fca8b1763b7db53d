package client

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Defaults for the zero values of Options.
const (
	DefaultTimeout                    = 50 * time.Millisecond
	DefaultSoftTTL                    = time.Minute
	DefaultHardTTL                    = 10 * time.Minute
	DefaultJitter                     = 0.1
	DefaultNegativeTTL                = 5 * time.Second
	DefaultTombstoneTTL               = 5 * time.Second
	DefaultLoaderTimeout              = 2 * time.Second
	DefaultMaxLoaders                 = 32
	DefaultBreakerFailures            = 5
	DefaultBreakerWindow              = 10
	DefaultBreakerDelay               = time.Second
	DefaultBreakerSuccesses           = 2
	DefaultClusterStateReloadInterval = time.Second
	DefaultLocalTTL                   = time.Second
	DefaultHotKeysInterval            = time.Second
	DefaultHotKeysTop                 = 16
)

// OverloadMode is what Get does when the loader's bulkhead is full.
type OverloadMode int

const (
	// FailFast returns ErrOverloaded.
	FailFast OverloadMode = iota
	// ServeStale returns the last value held in the in-process cache, if
	// any, and ErrOverloaded otherwise.
	ServeStale
)

// Options configures New. A zero value means the default.
type Options struct {
	// Client is the cluster (or single node) client to use. When nil, New
	// builds a *redis.ClusterClient from Addrs with ContextTimeoutEnabled
	// and ClusterStateReloadInterval set. A caller-supplied client MUST
	// have ContextTimeoutEnabled (or a ReadTimeout near Timeout): go-redis
	// otherwise ignores the per-call deadline. Close does not close it.
	Client redis.UniversalClient
	// Replica serves the one retry of a read whose primary read timed out.
	// When Client is nil and NoReplicaRetry is false, New builds a
	// ReadOnly ClusterClient (READONLY, replica routing) from Addrs.
	Replica        redis.UniversalClient
	NoReplicaRetry bool

	Addrs              []string
	Username, Password string
	// TLS, when set, is the nodes' RESP over TLS (nodes started with
	// certificate files) for a built client: a workload passes
	// tlsfiles.Files.ClientConfig with a policy admitting cachenode, which
	// presents its certificate and checks the nodes' SPIFFE ID; a client
	// without a certificate, a config whose RootCAs hold the platform CA.
	TLS      *tls.Config
	PoolSize int
	// ClusterStateReloadInterval for a built client (default 1 s): a dead
	// primary cannot redirect anyone, so the slot map must be re-read.
	ClusterStateReloadInterval time.Duration

	// Timeout bounds each cache command (default 50 ms).
	Timeout time.Duration
	// SoftTTL is the age after which a value is served stale while one
	// caller refreshes it; HardTTL the server TTL after which it is a miss.
	SoftTTL, HardTTL time.Duration
	// Jitter spreads both TTLs by ±Jitter×TTL (default 0.1); NoJitter
	// turns it off.
	Jitter   float64
	NoJitter bool
	// NegativeTTL is the TTL of a cached ErrNotFound (default 5 s).
	NegativeTTL time.Duration
	// TombstoneTTL is how long Invalidate's tombstone refuses older fills
	// (default 5 s). It should exceed the slowest loader.
	TombstoneTTL time.Duration
	// SecondDeleteDelay, when set, makes Invalidate delete again after
	// this delay any value older than the writer's version.
	SecondDeleteDelay time.Duration

	// LoaderTimeout bounds one loader call (default 2 s). The loader MUST
	// honour its context.
	LoaderTimeout time.Duration
	// MaxLoaders caps concurrent loader calls of this client (default 32);
	// LoaderWait is how long a call may wait for a slot (default 0: fail
	// at once). Overload says what Get returns when no slot is free.
	MaxLoaders int
	LoaderWait time.Duration
	Overload   OverloadMode

	// The breaker opens after BreakerFailures failures among the last
	// BreakerWindow cache commands, stays open BreakerDelay, and closes
	// after BreakerSuccesses successful probes.
	BreakerFailures  int
	BreakerWindow    int
	BreakerDelay     time.Duration
	BreakerSuccesses int

	// LocalSize enables the in-process cache of hot keys with this many
	// entries (0 = off). Run polls CACHE HOTKEYS every HotKeysInterval on
	// every primary; the HotKeysTop hottest keys with at least
	// HotKeysMinCount estimated accesses are served from process memory
	// for LocalTTL. HotKeysNamespace is passed to CACHE HOTKEYS.
	LocalSize        int
	LocalTTL         time.Duration
	HotKeysInterval  time.Duration
	HotKeysTop       int
	HotKeysMinCount  int64
	HotKeysNamespace string

	// Registerer receives the client's metrics (none registered if nil).
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Now is the clock for soft expiry and the local cache (tests).
	Now func() time.Time
	// OnRefresh is called after each background refresh (a test signal).
	OnRefresh func(key string, err error)
	// OnHotKeys is called after each hot-key poll (a test signal).
	OnHotKeys func(keys []string, err error)
}

func (o *Options) defaults() error {
	if o.Client == nil && len(o.Addrs) == 0 {
		return fmt.Errorf("cachenode/client: Options needs Client or Addrs")
	}
	setDur := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	setInt := func(i *int, def int) {
		if *i == 0 {
			*i = def
		}
	}
	setDur(&o.Timeout, DefaultTimeout)
	setDur(&o.SoftTTL, DefaultSoftTTL)
	setDur(&o.HardTTL, DefaultHardTTL)
	setDur(&o.NegativeTTL, DefaultNegativeTTL)
	setDur(&o.TombstoneTTL, DefaultTombstoneTTL)
	setDur(&o.LoaderTimeout, DefaultLoaderTimeout)
	setDur(&o.BreakerDelay, DefaultBreakerDelay)
	setDur(&o.ClusterStateReloadInterval, DefaultClusterStateReloadInterval)
	setDur(&o.LocalTTL, DefaultLocalTTL)
	setDur(&o.HotKeysInterval, DefaultHotKeysInterval)
	setInt(&o.MaxLoaders, DefaultMaxLoaders)
	setInt(&o.BreakerFailures, DefaultBreakerFailures)
	setInt(&o.BreakerWindow, DefaultBreakerWindow)
	setInt(&o.BreakerSuccesses, DefaultBreakerSuccesses)
	setInt(&o.HotKeysTop, DefaultHotKeysTop)
	if o.Jitter == 0 {
		o.Jitter = DefaultJitter
	}
	if o.NoJitter {
		o.Jitter = 0
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	switch {
	case o.Timeout < 0, o.SoftTTL < 0, o.NegativeTTL < 0, o.TombstoneTTL < 0, o.LoaderTimeout < 0, o.LoaderWait < 0,
		o.SecondDeleteDelay < 0, o.BreakerDelay < 0, o.LocalTTL < 0, o.HotKeysInterval < 0:
		return fmt.Errorf("cachenode/client: negative duration in Options")
	case o.HardTTL < o.SoftTTL:
		return fmt.Errorf("cachenode/client: HardTTL %v is below SoftTTL %v", o.HardTTL, o.SoftTTL)
	case o.Jitter < 0 || o.Jitter >= 1:
		return fmt.Errorf("cachenode/client: Jitter %v not in [0, 1)", o.Jitter)
	case o.MaxLoaders < 0, o.BreakerFailures < 0, o.BreakerWindow < o.BreakerFailures, o.BreakerSuccesses < 0,
		o.LocalSize < 0, o.HotKeysTop < 0:
		return fmt.Errorf("cachenode/client: invalid count in Options")
	}
	return nil
}
