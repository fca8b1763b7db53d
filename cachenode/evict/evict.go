// Package evict holds the eviction policies and the per-entry access
// metadata they read: a 32-bit word that is an LRU clock (seconds) or, for
// LFU, Redis's layout of a 24-bit last-decrement time in minutes and an
// 8-bit logarithmic counter.
//
// Eviction is approximate, as in Redis: the keyspace samples a few keys and
// evicts the one with the highest Score. Everything here is a pure function
// of its inputs (the clock is passed in), so it needs no locking.
package evict

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Policy is a namespace's eviction policy.
type Policy uint8

// Policies. The zero value is AllKeysLRU, the default.
const (
	AllKeysLRU Policy = iota
	AllKeysLFU
	VolatileTTL
	NoEviction
)

var names = [...]string{"allkeys-lru", "allkeys-lfu", "volatile-ttl", "noeviction"}

func (p Policy) String() string {
	if int(p) < len(names) {
		return names[p]
	}
	return fmt.Sprintf("policy(%d)", p)
}

// Parse reads a policy name as Redis spells it (case-insensitive).
func Parse(s string) (Policy, error) {
	for i, n := range names {
		if strings.EqualFold(s, n) {
			return Policy(i), nil
		}
	}
	return 0, fmt.Errorf("%w: %q (want one of %s)", ErrUnknownPolicy, s, strings.Join(names[:], ", "))
}

// Evicts reports whether the policy ever evicts.
func (p Policy) Evicts() bool { return p != NoEviction }

// VolatileOnly reports whether only keys with a TTL are candidates.
func (p Policy) VolatileOnly() bool { return p == VolatileTTL }

// LFU parameters, Redis's defaults (lfu-log-factor 10, lfu-decay-time 1).
const (
	LFUInitVal   = 5
	LFULogFactor = 10
	// LFUDecayMinutes is how many idle minutes take one off the counter.
	LFUDecayMinutes = 1
)

// Init returns the metadata of a freshly written key.
func Init(p Policy, nowMs int64) uint32 {
	if p == AllKeysLFU {
		return lfuPack(minutes(nowMs), LFUInitVal)
	}
	return lruClock(nowMs)
}

// Touch returns the metadata after one access.
func Touch(p Policy, meta uint32, nowMs int64) uint32 {
	if p == AllKeysLFU {
		c := lfuDecayed(meta, nowMs)
		c = lfuLogIncr(c)
		return lfuPack(minutes(nowMs), c)
	}
	return lruClock(nowMs)
}

// Score ranks an eviction candidate: higher is a better victim. expireAt is
// the key's deadline in unix ms (0 = none).
func Score(p Policy, meta uint32, expireAt, nowMs int64) uint64 {
	switch p {
	case AllKeysLFU:
		return uint64(255 - lfuDecayed(meta, nowMs))
	case VolatileTTL:
		if expireAt == 0 {
			return 0
		}
		// Sooner deadline = better victim.
		return uint64(1<<62) - uint64(max(expireAt, 0))
	default:
		return uint64(lruClock(nowMs) - meta) // idle seconds; wraps harmlessly after 136 years
	}
}

// Counter returns the LFU counter (after decay) for OBJECT FREQ-style reports.
func Counter(meta uint32, nowMs int64) uint8 { return lfuDecayed(meta, nowMs) }

// IdleSeconds returns the LRU idle time.
func IdleSeconds(meta uint32, nowMs int64) uint32 { return lruClock(nowMs) - meta }

func lruClock(nowMs int64) uint32 { return uint32(nowMs / 1000) }

func minutes(nowMs int64) uint32 { return uint32(nowMs/60000) & 0xffffff }

func lfuPack(min uint32, c uint8) uint32 { return min<<8 | uint32(c) }

// lfuDecayed is the counter after subtracting one per decay period elapsed
// since the last decrement time stored in meta.
func lfuDecayed(meta uint32, nowMs int64) uint8 {
	last := meta >> 8
	c := uint8(meta)
	now := minutes(nowMs)
	var elapsed uint32
	if now >= last {
		elapsed = now - last
	} else {
		elapsed = 0xffffff - last + now
	}
	periods := elapsed / LFUDecayMinutes
	if periods >= uint32(c) {
		return 0
	}
	return c - uint8(periods)
}

// lfuLogIncr increments c with probability 1/((c-init)*factor+1), so the
// counter grows with the logarithm of the access count and saturates at 255.
func lfuLogIncr(c uint8) uint8 {
	if c == 255 {
		return 255
	}
	base := float64(c) - LFUInitVal
	if base < 0 {
		base = 0
	}
	if rand.Float64() < 1.0/(base*LFULogFactor+1) {
		return c + 1
	}
	return c
}
