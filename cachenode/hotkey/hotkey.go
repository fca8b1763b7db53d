// Package hotkey finds a namespace's most accessed keys cheaply: one access
// in N is sampled into a count-min sketch, and the keys whose estimate is
// among the K largest are kept in a small top-K table. Estimates are in
// sampled accesses; multiply by N for an approximate access count.
//
// Counts age: every AgeEvery samples all of them are halved (TinyLFU's
// reset), so the table follows what is hot now, and a key that was hot an
// hour ago gives way to today's within a few aging periods.
//
// A Tracker is safe for concurrent use. Unsampled accesses cost one cheap
// random number; sampled ones take a mutex.
package hotkey

import (
	"hash/maphash"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
)

// Defaults.
const (
	DefaultSampleEvery = 100
	DefaultK           = 16
	DefaultWidth       = 2048
	DefaultDepth       = 4
	// DefaultAgeEvery is 10 samples per sketch counter of one row.
	DefaultAgeEvery = 10 * DefaultWidth
)

// Config configures a Tracker. Zero values take the defaults.
type Config struct {
	// SampleEvery samples one access in SampleEvery (1 = every access).
	SampleEvery int
	// K is the number of hot keys kept.
	K int
	// Width and Depth size the count-min sketch.
	Width, Depth int
	// AgeEvery halves every count after this many samples (default 10 ×
	// Width).
	AgeEvery int
	// Sink, when set, receives every sampled key (the optional sample
	// stream). It is called with the tracker's lock held: it must not block.
	Sink func(key string)
}

// Key is one hot key and its estimated sampled access count.
type Key struct {
	Key   string
	Count uint64
}

// Tracker is a sampled count-min sketch with a top-K table.
type Tracker struct {
	cfg   Config
	every atomic.Int64 // the sampling rate in use (SetSampleEvery)
	total atomic.Uint64

	mu    sync.Mutex
	seeds []maphash.Seed
	cms   [][]uint32
	top   map[string]uint64
	age   int // samples since the last aging
}

// New returns a Tracker.
func New(cfg Config) *Tracker {
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = DefaultSampleEvery
	}
	if cfg.K <= 0 {
		cfg.K = DefaultK
	}
	if cfg.Width <= 0 {
		cfg.Width = DefaultWidth
	}
	if cfg.Depth <= 0 {
		cfg.Depth = DefaultDepth
	}
	if cfg.AgeEvery <= 0 {
		cfg.AgeEvery = 10 * cfg.Width
	}
	t := &Tracker{cfg: cfg, top: map[string]uint64{}}
	t.every.Store(int64(cfg.SampleEvery))
	for range cfg.Depth {
		t.seeds = append(t.seeds, maphash.MakeSeed())
		t.cms = append(t.cms, make([]uint32, cfg.Width))
	}
	return t
}

// Observe counts one access to key (sampled 1 in SampleEvery).
func (t *Tracker) Observe(key []byte) {
	// Random, not every N-th: a counter aliases with periodic access
	// patterns (a client cycling over N keys would only ever sample one).
	if n := t.every.Load(); n > 1 && rand.Int64N(n) != 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total.Add(1)
	if t.age++; t.age >= t.cfg.AgeEvery {
		t.halve()
	}
	est := uint32(1<<32 - 1)
	for i, seed := range t.seeds {
		j := maphash.Bytes(seed, key) % uint64(t.cfg.Width)
		if t.cms[i][j] < 1<<32-1 {
			t.cms[i][j]++
		}
		est = min(est, t.cms[i][j])
	}
	if _, ok := t.top[string(key)]; ok {
		t.top[string(key)] = uint64(est)
	} else if len(t.top) < t.cfg.K {
		t.top[string(key)] = uint64(est)
	} else {
		// Compare with the table's current estimates, not the ones stored
		// at each key's last sample: a stale low count would let a colder
		// key displace a hotter one that was not sampled lately.
		minKey, minCount := "", uint64(1<<63)
		for k := range t.top {
			c := t.estimate(k)
			t.top[k] = c
			if c < minCount {
				minKey, minCount = k, c
			}
		}
		if uint64(est) > minCount {
			delete(t.top, minKey)
			t.top[string(key)] = uint64(est)
		}
	}
	if t.cfg.Sink != nil {
		t.cfg.Sink(string(key))
	}
}

// estimate is key's count in the sketch; t.mu is held.
func (t *Tracker) estimate(key string) uint64 {
	est := uint32(1<<32 - 1)
	for i, seed := range t.seeds {
		est = min(est, t.cms[i][maphash.String(seed, key)%uint64(t.cfg.Width)])
	}
	return uint64(est)
}

// Top returns the hot keys, hottest first.
func (t *Tracker) Top() []Key {
	t.mu.Lock()
	out := make([]Key, 0, len(t.top))
	for k, c := range t.top {
		out = append(out, Key{k, c})
	}
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// Sampled is the number of sampled accesses so far.
func (t *Tracker) Sampled() uint64 { return t.total.Load() }

// SampleEvery is the sampling rate in use.
func (t *Tracker) SampleEvery() int { return int(t.every.Load()) }

// SetSampleEvery changes the sampling rate (n <= 0: the default). Counts
// taken at another rate are not comparable, so a change clears them.
func (t *Tracker) SetSampleEvery(n int) {
	if n <= 0 {
		n = DefaultSampleEvery
	}
	if t.every.Swap(int64(n)) != int64(n) {
		t.Reset()
	}
}

// halve ages every count; t.mu is held.
func (t *Tracker) halve() {
	t.age = 0
	for _, row := range t.cms {
		for j := range row {
			row[j] >>= 1
		}
	}
	for k, c := range t.top {
		if c >>= 1; c == 0 {
			delete(t.top, k)
		} else {
			t.top[k] = c
		}
	}
}

// Reset clears the sketch and the table.
func (t *Tracker) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.cms {
		clear(t.cms[i])
	}
	clear(t.top)
	t.total.Store(0)
	t.age = 0
}
