// Package bucket holds rate-limit state: token buckets and fixed-window
// counters, in memory or in Redis, with identical semantics. One Check
// decides a whole request: it evaluates every item and commits only if no
// vetoing item is denied (check-all-then-commit), so a denied request
// consumes nothing. On a Redis Cluster that is atomic per hash slot: items
// of several slots are committed slot by slot and given back when another
// slot denies (see Redis.checkSpread for the exact guarantee).
//
// Arithmetic is in integers so that Go (int64) and Redis Lua (float64)
// agree exactly: a token bucket stores tokens × window-in-ms ("units"), so
// one elapsed millisecond refills exactly Limit units.
package bucket

import (
	"time"
)

// Kind is the counting algorithm of an item.
type Kind int

const (
	// TokenBucket refills Limit tokens per Window up to Capacity.
	TokenBucket Kind = iota
	// FixedWindow admits at most Limit per aligned Window.
	FixedWindow
	// SlidingWindow is the sliding window counter: the previous aligned
	// window's count, weighted by how much of it still overlaps the
	// trailing Window, plus the current window's count, must stay within
	// Limit. O(1) state and no boundary doubling, unlike FixedWindow.
	SlidingWindow
)

// Item is one bucket a request touches.
type Item struct {
	// Key names the bucket; callers build them. On a Redis Cluster, the
	// keys of one Check that share a hash tag are decided by one script,
	// the keys of each other tag by one more.
	Key      string
	Kind     Kind
	Limit    uint64
	Capacity uint64 // token bucket only; at least Limit
	Window   time.Duration
	Cost     uint64
	// Veto: a denial of this item blocks the commit of every item (ENFORCE).
	// Non-veto items (SHADOW) are counted when the request commits but their
	// denial blocks nothing.
	Veto bool
	// Lease, when above 0, asks for up to Lease more tokens on top of Cost
	// if the request commits (token leasing): as many whole tokens as are
	// left after Cost, at most Lease; Result.Leased says how many. It never
	// changes whether the item is allowed.
	Lease uint64
}

// Result is one item's outcome.
type Result struct {
	Allowed bool
	// Remaining whole tokens (or requests) after this request.
	Remaining uint64
	// RetryAfter is how long until Cost would be allowed (0 when allowed).
	RetryAfter time.Duration
	// ResetAfter is how long until the bucket is full (the window ends).
	ResetAfter time.Duration
	// Leased is how many tokens beyond Cost were taken (see Item.Lease).
	Leased uint64
}

// Decision is the outcome of one Check.
type Decision struct {
	// Committed is true when no vetoing item was denied and the allowed
	// items were consumed.
	Committed bool
	Results   []Result
}

// state is one bucket: token bucket (a = tokens in units, b = last refill
// ms), fixed window (a = window index, b = count) or sliding window (a =
// window index, b = its count, c = the previous window's count).
type state struct {
	a, b, c int64
	exists  bool
}

func ceilDiv(a, b int64) int64 {
	q := a / b
	if q*b < a {
		q++
	}
	return q
}

// eval computes one item at now (ms). It returns the result before commit
// (pre) and after commit (post), and the state to store on commit.
func eval(it Item, s state, now int64) (allowed bool, pre, post Result, next state) {
	win := it.Window.Milliseconds()
	limit := int64(it.Limit)
	cost := int64(it.Cost)
	switch it.Kind {
	case FixedWindow:
		w := now / win
		var c int64
		if s.exists && s.a == w {
			c = s.b
		}
		allowed = c+cost <= limit
		end := time.Duration((w+1)*win-now) * time.Millisecond
		pre = Result{Allowed: allowed, Remaining: uint64(max(0, limit-c)), ResetAfter: end}
		if !allowed {
			pre.RetryAfter = end
		}
		post = pre
		if allowed {
			extra := min(int64(it.Lease), limit-c-cost)
			c += extra
			post.Leased = uint64(extra)
			post.Remaining = uint64(limit - c - cost)
		}
		return allowed, pre, post, state{a: w, b: c + cost, exists: true}
	case SlidingWindow:
		return evalSliding(it, s, now)
	default:
		capU := int64(it.Capacity) * win
		costU := cost * win
		tok, ts := capU, now
		if s.exists {
			tok, ts = min(s.a, capU), s.b
		}
		if need := capU - tok; need > 0 {
			if el := max(0, now-ts); el >= ceilDiv(need, limit) {
				tok = capU
			} else {
				tok += el * limit
			}
		}
		allowed = tok >= costU
		pre = Result{Allowed: allowed, Remaining: uint64(tok / win),
			ResetAfter: time.Duration(ceilDiv(capU-tok, limit)) * time.Millisecond}
		if !allowed {
			pre.RetryAfter = time.Duration(ceilDiv(costU-tok, limit)) * time.Millisecond
		}
		post = pre
		if allowed {
			tok -= costU
			extra := min(int64(it.Lease), tok/win)
			tok -= extra * win
			post.Leased = uint64(extra)
			post.Remaining = uint64(tok / win)
			post.ResetAfter = time.Duration(ceilDiv(capU-tok, limit)) * time.Millisecond
		}
		return allowed, pre, post, state{a: tok, b: now, exists: true}
	}
}

// ttl is how long an idle bucket is kept: about twice its full-refill time
// (token bucket), until its window ends (fixed window) or until the next
// window ends (sliding window); at least 1s.
func ttl(it Item, now int64) time.Duration {
	win := it.Window.Milliseconds()
	var ms int64
	switch it.Kind {
	case FixedWindow:
		ms = (now/win+1)*win - now
	case SlidingWindow:
		// The current window's count still weighs until the next one ends.
		ms = (now/win+2)*win - now
	default:
		ms = 2 * ceilDiv(int64(it.Capacity)*win, int64(it.Limit))
	}
	return time.Duration(max(ms, 1000)) * time.Millisecond
}

// evalSliding is eval for SlidingWindow. Counts are weighed in units of
// 1/window-ms so the blend stays exact in integers: the estimate at offset
// e into window w is prev×(win−e) + cur×win units against Limit×win.
func evalSliding(it Item, s state, now int64) (allowed bool, pre, post Result, next state) {
	win := it.Window.Milliseconds()
	limit, cost := int64(it.Limit), int64(it.Cost)
	w := now / win
	e := now - w*win
	var cur, prev int64
	if s.exists {
		switch s.a {
		case w:
			cur, prev = s.b, s.c
		case w - 1:
			prev = s.b
		}
	}
	capU := limit * win
	used := prev*(win-e) + cur*win
	allowed = used+cost*win <= capU
	pre = Result{Allowed: allowed, Remaining: uint64(max(0, capU-used) / win), ResetAfter: slidingReset(cur, prev, e, win)}
	if !allowed {
		pre.RetryAfter = slidingRetry(cur, prev, cost, limit, e, win)
	}
	post = pre
	next = state{a: w, b: cur, c: prev, exists: true}
	if allowed {
		free := (capU - used - cost*win) / win
		extra := min(int64(it.Lease), free)
		next.b = cur + cost + extra
		post.Leased = uint64(extra)
		post.Remaining = uint64(free - extra)
		post.ResetAfter = slidingReset(next.b, prev, e, win)
	}
	return allowed, pre, post, next
}

// slidingReset is how long until the estimate is zero: the end of the next
// window if the current one counted anything, else the end of this one if
// the previous one did.
func slidingReset(cur, prev, e, win int64) time.Duration {
	switch {
	case cur > 0:
		return time.Duration(2*win-e) * time.Millisecond
	case prev > 0:
		return time.Duration(win-e) * time.Millisecond
	}
	return 0
}

// slidingRetry is the first millisecond at which cost fits: later in this
// window as the previous window's weight fades, else in the next window
// (where this window's count becomes the fading one). A cost above the
// limit never fits; the time until the estimate is zero is reported.
func slidingRetry(cur, prev, cost, limit, e, win int64) time.Duration {
	var at int64 // offset from the start of this window
	switch {
	case cur+cost <= limit:
		// prev×(win−x) ≤ (limit−cur−cost)×win  ⇔  x ≥ win − ⌊room/prev⌋
		at = win - (limit-cur-cost)*win/prev
	case cost <= limit:
		at = win + max(0, win-(limit-cost)*win/cur)
	default:
		at = 2 * win
	}
	return time.Duration(at-e) * time.Millisecond
}
