package authz

import (
	"crypto/sha256"
	"sync"
	"time"
)

// tokenCache remembers verified tokens so a repeat skips the signature
// check. It is bounded (evicting an arbitrary entry of a full shard), keyed
// by the SHA-256 of provider and token (the token itself is never kept),
// and an entry is only good until the token's exp and while the epoch it
// was stored under is current: bumping the epoch invalidates everything.
type tokenCache struct {
	shards   [cacheShards]cacheShard
	perShard int
}

const cacheShards = 32

type cacheShard struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]*cacheEntry
}

type cacheEntry struct {
	exp   time.Time
	epoch uint64
	jti   string
	id    identity
}

func newTokenCache(size int) *tokenCache {
	c := &tokenCache{perShard: max(1, size/cacheShards)}
	for i := range c.shards {
		c.shards[i].m = map[[sha256.Size]byte]*cacheEntry{}
	}
	return c
}

func (c *tokenCache) shard(k [sha256.Size]byte) *cacheShard { return &c.shards[k[0]%cacheShards] }

func (c *tokenCache) get(k [sha256.Size]byte, now time.Time, epoch uint64) *cacheEntry {
	s := c.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[k]
	if e == nil {
		return nil
	}
	if e.epoch != epoch || !now.Before(e.exp) {
		delete(s.m, k)
		return nil
	}
	return e
}

func (c *tokenCache) put(k [sha256.Size]byte, e *cacheEntry) {
	s := c.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[k]; !ok && len(s.m) >= c.perShard {
		for victim := range s.m { // map order is arbitrary: random-ish eviction
			delete(s.m, victim)
			break
		}
	}
	s.m[k] = e
}

func (c *tokenCache) len() int {
	n := 0
	for i := range c.shards {
		c.shards[i].mu.Lock()
		n += len(c.shards[i].m)
		c.shards[i].mu.Unlock()
	}
	return n
}
