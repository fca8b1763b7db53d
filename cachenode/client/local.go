package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// local is the bounded in-process cache. It holds the hot keys (served
// while fresh) and values loaded while the cache was unavailable (served
// only as the stale answer of an overloaded loader). Safe for concurrent
// use.
type local struct {
	mu      sync.Mutex
	size    int
	entries map[string]localEntry
}

type localEntry struct {
	payload  []byte
	negative bool
	expires  int64 // unix ms; past it the entry is only a stale fallback
}

func newLocal(size int) *local { return &local{size: size, entries: make(map[string]localEntry, size)} }

func (l *local) get(key string) (localEntry, bool) {
	l.mu.Lock()
	e, ok := l.entries[key]
	l.mu.Unlock()
	return e, ok
}

func (l *local) put(key string, e localEntry, now int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.entries[key]; !ok && len(l.entries) >= l.size {
		// Full: drop expired entries, else an arbitrary one. The set is
		// small and turns over with the hot-key list.
		for k, v := range l.entries {
			if v.expires < now {
				delete(l.entries, k)
			}
		}
		for k := range l.entries {
			if len(l.entries) < l.size {
				break
			}
			delete(l.entries, k)
		}
	}
	l.entries[key] = e
}

func (l *local) drop(key string) {
	l.mu.Lock()
	delete(l.entries, key)
	l.mu.Unlock()
}

// Run polls CACHE HOTKEYS on every primary every Options.HotKeysInterval
// and keeps the hottest keys' values in process memory (Options.LocalSize
// must be set). It returns when ctx is done; call it in a goroutine.
func (c *Client) Run(ctx context.Context) error {
	if c.local == nil {
		return fmt.Errorf("cachenode/client: Run needs Options.LocalSize")
	}
	t := time.NewTicker(c.opts.HotKeysInterval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, c.opts.HotKeysInterval)
		keys, err := c.pollHotKeys(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			c.log.Debug("hot keys poll failed", "err", err)
		}
		if err == nil {
			c.setHot(keys)
		}
		if c.opts.OnHotKeys != nil {
			c.opts.OnHotKeys(keys, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

type hotKey struct {
	key   string
	count int64
}

func (c *Client) pollHotKeys(ctx context.Context) ([]string, error) {
	args := []any{"CACHE", "HOTKEYS"}
	if c.opts.HotKeysNamespace != "" {
		args = append(args, c.opts.HotKeysNamespace)
	}
	var mu sync.Mutex
	var all []hotKey
	collect := func(ctx context.Context, rdb interface {
		Do(context.Context, ...any) *redis.Cmd
	}) error {
		res, err := rdb.Do(ctx, args...).Slice()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, r := range res {
			pair, ok := r.([]any)
			if !ok || len(pair) != 2 {
				return errors.New("cachenode/client: CACHE HOTKEYS: unexpected reply")
			}
			k, _ := pair[0].(string)
			n, _ := pair[1].(int64)
			all = append(all, hotKey{k, n})
		}
		return nil
	}
	var err error
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return collect(ctx, n) })
	} else {
		err = collect(ctx, c.rdb)
	}
	if err != nil {
		return nil, err
	}
	sort.Slice(all, func(i, j int) bool { return all[i].count > all[j].count })
	keys := make([]string, 0, c.opts.HotKeysTop)
	for _, h := range all {
		if len(keys) == c.opts.HotKeysTop || h.count < c.opts.HotKeysMinCount {
			break
		}
		keys = append(keys, h.key)
	}
	return keys, nil
}

// setHot publishes the hot set; keys that left it are dropped from the
// local cache so they are read from the cluster again.
func (c *Client) setHot(keys []string) {
	hot := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		hot[k] = struct{}{}
	}
	if old := c.hot.Load(); old != nil {
		for k := range *old {
			if _, ok := hot[k]; !ok {
				c.local.drop(k)
			}
		}
	}
	c.hot.Store(&hot)
}

// isHot reports whether key is in the current hot set: one atomic load and,
// when the set is not empty, one map lookup.
func (c *Client) isHot(key string) bool {
	h := c.hot.Load()
	if h == nil || len(*h) == 0 {
		return false
	}
	_, ok := (*h)[key]
	return ok
}
