package coordinator

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// idempotency remembers the outcome of writes by Idempotency-Key for a TTL,
// so a client retrying a put after a lost response does not create a second
// write with a newer timestamp (which could overwrite someone else's later
// write under LWW). In flight retries wait for the first attempt. Failed
// attempts are forgotten so the retry runs. The cache is per coordinator and
// in memory: retries must go to the same node to be de-duplicated.
type idempotency struct {
	mu    sync.Mutex
	ttl   time.Duration
	max   int
	now   func() time.Time
	m     map[string]*idemEntry
	order *list.List // of *idemEntry, oldest first
}

type idemEntry struct {
	key     string
	fp      [32]byte
	done    chan struct{}
	res     WriteResult
	err     error
	expires time.Time
	elem    *list.Element
}

func newIdempotency(ttl time.Duration, max int, now func() time.Time) *idempotency {
	return &idempotency{ttl: ttl, max: max, now: now, m: map[string]*idemEntry{}, order: list.New()}
}

// do runs fn once per key within the TTL and returns its result, with
// replayed set when the result came from an earlier attempt.
func (c *idempotency) do(ctx context.Context, key string, fp [32]byte, fn func() (WriteResult, error)) (WriteResult, bool, error) {
	c.mu.Lock()
	c.evictLocked()
	if e, ok := c.m[key]; ok {
		c.mu.Unlock()
		if e.fp != fp {
			return WriteResult{}, false, ErrIdempotencyMismatch
		}
		select {
		case <-e.done:
		case <-ctx.Done():
			return WriteResult{}, false, ErrTimeout
		}
		if e.err == nil {
			return e.res, true, nil
		}
		// The first attempt failed and was forgotten; run again.
		return c.do(ctx, key, fp, fn)
	}
	e := &idemEntry{key: key, fp: fp, done: make(chan struct{}), expires: c.now().Add(c.ttl)}
	e.elem = c.order.PushBack(e)
	c.m[key] = e
	c.mu.Unlock()

	e.res, e.err = fn()
	if e.err != nil {
		c.mu.Lock()
		if c.m[key] == e {
			delete(c.m, key)
			c.order.Remove(e.elem)
		}
		c.mu.Unlock()
	}
	close(e.done)
	return e.res, false, e.err
}

func (c *idempotency) evictLocked() {
	now := c.now()
	for f := c.order.Front(); f != nil; f = c.order.Front() {
		e := f.Value.(*idemEntry)
		if c.order.Len() <= c.max && now.Before(e.expires) {
			return
		}
		select {
		case <-e.done:
		default:
			if c.order.Len() <= c.max {
				return // in flight and not over the cap
			}
		}
		c.order.Remove(f)
		if c.m[e.key] == e {
			delete(c.m, e.key)
		}
	}
}
