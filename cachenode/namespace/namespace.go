// Package namespace binds tenants to their own keyspace and limits. A
// namespace has a memory quota and eviction policy (enforced against its own
// keys only), a default TTL, a maximum value size, ops/s and bytes/s limits,
// a hot-key tracker and counters. The set of namespaces comes from a YAML
// file that is re-read when it changes; a reload changes limits in place
// without touching data.
package namespace

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portico-io/portico/cachenode/evict"
	"github.com/portico-io/portico/cachenode/hotkey"
	"github.com/portico-io/portico/cachenode/keyspace"
)

// Default is the namespace of connections that have not authenticated.
const Default = "default"

// Defaults.
const (
	DefaultMaxValueSize = 1 << 20
	DefaultMaxPrefixes  = 64
	OtherPrefix         = "_other"
)

// Settings are one namespace's limits. The zero value of each field is its
// default: no quota, allkeys-lru, no default TTL, 1 MB values, no rate
// limits, no per-prefix stats.
type Settings struct {
	Name string
	// Secret is the SHA-256 of the AUTH secret; HasSecret says whether one
	// is set (a namespace without one cannot be AUTHed into).
	Secret    [32]byte
	HasSecret bool
	// MaxMemory is the quota in bytes (0 = only the node's maxmemory).
	MaxMemory    int64
	Policy       evict.Policy
	DefaultTTL   time.Duration
	MaxValueSize int64
	// OpsPerSecond and BytesPerSecond limit the namespace (0 = unlimited);
	// bytes count request arguments and replies.
	OpsPerSecond   float64
	BytesPerSecond float64
	// PrefixDepth > 0 keeps counters per key prefix: the first PrefixDepth
	// segments split at PrefixSeparator (default ":"), at most MaxPrefixes
	// distinct prefixes, the rest counted as OtherPrefix.
	PrefixDepth     int
	PrefixSeparator string
	MaxPrefixes     int
	// HotKeySampleEvery samples one access in N for hot keys.
	HotKeySampleEvery int
}

func (s *Settings) defaults() {
	if s.MaxValueSize <= 0 {
		s.MaxValueSize = DefaultMaxValueSize
	}
	if s.PrefixSeparator == "" {
		s.PrefixSeparator = ":"
	}
	if s.MaxPrefixes <= 0 {
		s.MaxPrefixes = DefaultMaxPrefixes
	}
	if s.HotKeySampleEvery <= 0 {
		s.HotKeySampleEvery = hotkey.DefaultSampleEvery
	}
}

// CheckSecret compares secret with the configured one in constant time.
func (s *Settings) CheckSecret(secret []byte) bool {
	h := sha256.Sum256(secret)
	return s.HasSecret && subtle.ConstantTimeCompare(h[:], s.Secret[:]) == 1
}

// Counters are a namespace's monotonic counters, read by metrics and INFO.
type Counters struct {
	Ops, Hits, Misses, RateLimited, OOM, BytesIn, BytesOut atomic.Int64
}

// Namespace is one tenant's keyspace, limits and counters. Safe for
// concurrent use.
type Namespace struct {
	Name     string
	DB       *keyspace.DB
	Hot      *hotkey.Tracker
	Counters Counters

	settings atomic.Pointer[Settings]
	removed  atomic.Bool
	ops, bw  bucket

	prefixes atomic.Pointer[prefixTable] // nil: no per-prefix counting
}

// Settings returns the current settings (do not modify).
func (n *Namespace) Settings() *Settings { return n.settings.Load() }

// Removed reports whether a reload dropped this namespace.
func (n *Namespace) Removed() bool { return n.removed.Load() }

func (n *Namespace) apply(s *Settings) {
	n.settings.Store(s)
	n.DB.SetPolicy(s.Policy)
	n.setPrefixScheme(s)
	n.Hot.SetSampleEvery(s.HotKeySampleEvery)
	n.ops.setRate(s.OpsPerSecond)
	n.bw.setRate(s.BytesPerSecond)
}

// SetPolicy changes the namespace's eviction policy at once (CONFIG SET
// maxmemory-policy), keeping its other settings; the next reload of the
// namespaces file that changes anything sets the file's policy again.
func (n *Namespace) SetPolicy(p evict.Policy) {
	s := *n.settings.Load()
	s.Policy = p
	n.settings.Store(&s)
	n.DB.SetPolicy(p)
}

// Admit charges one operation of reqBytes against the rate limits.
func (n *Namespace) Admit(reqBytes int, nowMs int64) error {
	if !n.ops.take(1, nowMs) {
		n.Counters.RateLimited.Add(1)
		return ErrRateOps
	}
	if !n.bw.take(float64(reqBytes), nowMs) {
		n.Counters.RateLimited.Add(1)
		return ErrRateBytes
	}
	n.Counters.BytesIn.Add(int64(reqBytes))
	return nil
}

// ChargeReply charges reply bytes to the bandwidth limit.
func (n *Namespace) ChargeReply(replyBytes int, nowMs int64) {
	n.Counters.BytesOut.Add(int64(replyBytes))
	n.bw.charge(float64(replyBytes), nowMs)
}

// OverQuota reports whether the namespace is above its own quota.
func (n *Namespace) OverQuota() bool {
	q := n.Settings().MaxMemory
	return q > 0 && n.DB.Used() > q
}

// Registry holds the node's namespaces. Safe for concurrent use.
type Registry struct {
	mu     sync.RWMutex
	ns     map[string]*Namespace
	node   *keyspace.Usage
	shards int
	now    func() int64
	sink   func(ns, key string)
	obs    keyspace.Observer
}

// RegistryConfig configures a Registry.
type RegistryConfig struct {
	// Shards per namespace keyspace (default keyspace.DefaultShards).
	Shards int
	// Now is the clock in unix ms (default wall clock).
	Now func() int64
	// HotKeySink receives sampled keys (the optional sample stream); it must
	// not block.
	HotKeySink func(ns, key string)
	// Observer is given every namespace's changes (keyspace.Config.Observer;
	// DB.Name tells which namespace), e.g. the replication feed.
	Observer keyspace.Observer
}

// NewRegistry returns a registry holding only the default namespace.
func NewRegistry(cfg RegistryConfig) *Registry {
	r := &Registry{ns: map[string]*Namespace{}, node: &keyspace.Usage{}, shards: cfg.Shards, now: cfg.Now, sink: cfg.HotKeySink, obs: cfg.Observer}
	if r.now == nil {
		r.now = func() int64 { return time.Now().UnixMilli() }
	}
	if err := r.Apply([]Settings{{Name: Default}}); err != nil {
		panic(err) // the built-in default is valid
	}
	return r
}

// NodeUsage is the memory accounted across all namespaces.
func (r *Registry) NodeUsage() *keyspace.Usage { return r.node }

// Now is the registry's clock.
func (r *Registry) Now() int64 { return r.now() }

// Get returns the named live namespace.
func (r *Registry) Get(name string) (*Namespace, error) {
	r.mu.RLock()
	n := r.ns[name]
	r.mu.RUnlock()
	if n == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknown, name)
	}
	return n, nil
}

// Auth returns the namespace name if secret matches.
func (r *Registry) Auth(name string, secret []byte) (*Namespace, error) {
	n, err := r.Get(name)
	if err != nil {
		return nil, ErrWrongSecret // do not reveal which namespaces exist
	}
	s := n.Settings()
	if !s.HasSecret {
		if name == Default {
			return nil, ErrNoSecret
		}
		return nil, ErrWrongSecret
	}
	if !s.CheckSecret(secret) {
		return nil, ErrWrongSecret
	}
	return n, nil
}

// All returns the live namespaces sorted by name.
func (r *Registry) All() []*Namespace {
	r.mu.RLock()
	out := make([]*Namespace, 0, len(r.ns))
	for _, n := range r.ns {
		out = append(out, n)
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Apply makes set the namespace configuration: existing namespaces get
// their new settings in place (data kept), new ones are created, and ones
// missing from set are removed (their data dropped, their connections
// refused). The default namespace always exists. Nothing changes when set
// is invalid.
func (r *Registry) Apply(set []Settings) error {
	seen := map[string]bool{}
	for i := range set {
		if err := validate(&set[i]); err != nil {
			return err
		}
		if seen[set[i].Name] {
			return fmt.Errorf("%w: namespace %q defined twice", ErrConfig, set[i].Name)
		}
		seen[set[i].Name] = true
	}
	if !seen[Default] {
		set = append(set, Settings{Name: Default})
		set[len(set)-1].defaults()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	next := make(map[string]*Namespace, len(set))
	for i := range set {
		s := set[i]
		n := r.ns[s.Name]
		if n == nil {
			n = &Namespace{
				Name: s.Name,
				DB: keyspace.New(keyspace.Config{Shards: r.shards, Now: r.now, Node: r.node, Policy: s.Policy,
					Name: s.Name, Observer: r.obs}),
			}
			var sink func(string)
			if r.sink != nil {
				name := s.Name
				sink = func(k string) { r.sink(name, k) }
			}
			n.Hot = hotkey.New(hotkey.Config{SampleEvery: s.HotKeySampleEvery, Sink: sink})
		}
		n.apply(&s)
		next[s.Name] = n
	}
	for name, n := range r.ns {
		if next[name] == nil {
			n.removed.Store(true)
			n.DB.Flush()
		}
	}
	r.ns = next
	return nil
}

func validate(s *Settings) error {
	if s.Name == "" || len(s.Name) > 64 {
		return fmt.Errorf("%w: namespace name %q: 1 to 64 characters", ErrConfig, s.Name)
	}
	for _, c := range s.Name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("%w: namespace name %q: only letters, digits, '_', '-', '.'", ErrConfig, s.Name)
		}
	}
	if s.MaxMemory < 0 || s.DefaultTTL < 0 || s.MaxValueSize < 0 || s.OpsPerSecond < 0 || s.BytesPerSecond < 0 || s.PrefixDepth < 0 ||
		math.IsNaN(s.OpsPerSecond) || math.IsNaN(s.BytesPerSecond) {
		return fmt.Errorf("%w: namespace %q: limits must not be negative", ErrConfig, s.Name)
	}
	if s.MaxValueSize > 512<<20 {
		return fmt.Errorf("%w: namespace %q: maxValueSize above 512mb", ErrConfig, s.Name)
	}
	s.defaults()
	return nil
}

func sha256Sum(s string) [32]byte { return sha256.Sum256([]byte(s)) }
