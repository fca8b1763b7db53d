package bucket

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"sync"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
)

//go:embed refund.lua
var refundLua string

// hashTag is the part of key that Redis Cluster hashes to a slot: the text
// between the first '{' and the first '}' after it when that is not empty,
// else the whole key.
func hashTag(key string) string {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e]
		}
	}
	return key
}

// tagGroups splits items by hash tag: indexes in item order, groups in order
// of first appearance. It returns nil when all items share one tag (the
// common case, decided by one script as on a single server). Two tags that
// hash to one slot still get a group each: a call more, never a wrong one.
func tagGroups(items []Item) [][]int {
	first := hashTag(items[0].Key)
	same := 1
	for same < len(items) && hashTag(items[same].Key) == first {
		same++
	}
	if same == len(items) {
		return nil
	}
	groups := [][]int{make([]int, same, len(items))}
	for i := range same {
		groups[0][i] = i
	}
	at := map[string]int{first: 0}
	for i := same; i < len(items); i++ {
		tag := hashTag(items[i].Key)
		g, ok := at[tag]
		if !ok {
			g = len(groups)
			at[tag] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// part is the items of one hash tag and check.lua's answer for them.
type part struct {
	items []Item
	shard string
	rep   reply
	err   error
}

// permit is a breaker permit this call holds, and a key of its shard.
type permit struct {
	cb  circuitbreaker.CircuitBreaker[any]
	key string
}

// checkSpread decides a request whose keys lie in several hash slots of a
// Cluster. Redis runs a script on the keys of one slot only, so each group
// of keys gets its own check.lua call, all at once, each under its shard's
// breaker. The request is committed when every group committed. When a
// group denied it, or failed, the groups that committed are given back
// (refund.lua) before Check returns, so a denied request ends up consuming
// nothing, as on a single server. What one script guarantees and this does
// not:
//   - Between a group's commit and its refund (one round trip) its tokens are
//     held, so a concurrent request on those buckets may be denied that would
//     have been admitted. Never the other way round: an admitted request took
//     its cost from every bucket, each under one atomic script, so no bucket
//     ever admits more than its limit.
//   - A refund that fails (timeout, shard down) leaves the tokens spent: at
//     most that request's cost and lease, per bucket (Refunds counts it).
//   - A group that timed out may still have committed on its shard, as one
//     script may; the request is decided by fail mode either way.
//
// Results are those one script would give: a given-back item reports the
// Remaining and ResetAfter from before its commit, and no lease.
func (r *Redis) checkSpread(ctx context.Context, items []Item, groups [][]int) (Decision, error) {
	parts := make([]part, len(groups))
	permits := make(map[string]permit, len(groups))
	for g, idx := range groups {
		p := &parts[g]
		p.items = make([]Item, len(idx))
		for j, i := range idx {
			p.items[j] = items[i]
		}
		p.shard = r.shard(ctx, p.items[0].Key)
		if _, ok := permits[p.shard]; ok {
			continue
		}
		cb := r.breaker(p.shard)
		if !cb.TryAcquirePermit() {
			r.release(ctx, permits)
			return Decision{}, fmt.Errorf("%w: shard %s: %w", ErrBackend, p.shard, ErrBreakerOpen)
		}
		permits[p.shard] = permit{cb: cb, key: p.items[0].Key}
	}
	var wg sync.WaitGroup
	for g := 1; g < len(parts); g++ {
		wg.Go(func() { parts[g].rep, parts[g].err = r.check(ctx, parts[g].items, true) })
	}
	parts[0].rep, parts[0].err = r.check(ctx, parts[0].items, true)
	wg.Wait()

	committed := true
	var err error
	var failed map[string]bool // shards with a failed call
	for _, p := range parts {
		switch {
		case p.err != nil:
			if failed == nil {
				failed = map[string]bool{}
			}
			failed[p.shard] = true
			committed = false
			if err == nil {
				err = p.err
			}
		case !p.rep.committed():
			committed = false
		}
	}
	// As in Check: every failure counts, a cancelled caller's too.
	for shard, pm := range permits {
		if failed[shard] {
			pm.cb.RecordFailure()
		} else {
			pm.cb.RecordSuccess()
		}
	}
	if !committed {
		r.refund(ctx, parts)
	}
	if err != nil {
		return Decision{}, err
	}
	d := Decision{Committed: committed, Results: make([]Result, len(items))}
	for g, idx := range groups {
		p := &parts[g]
		given := !committed && p.rep.committed()
		for j, i := range idx {
			res := p.rep.result(j)
			if given && res.Allowed {
				res.Remaining += p.items[j].Cost + res.Leased
				res.ResetAfter = p.rep.resetBefore(j, len(p.items))
				res.Leased = 0
			}
			d.Results[i] = res
		}
	}
	return d, nil
}

// refund gives back what the committed parts took, one refund.lua call per
// part, all at once. It has a timeout of its own: the request's may be
// spent, and tokens not given back stay consumed.
func (r *Redis) refund(ctx context.Context, parts []part) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Timeout)
	defer cancel()
	var wg sync.WaitGroup
	for g := range parts {
		p := &parts[g]
		if p.err != nil || !p.rep.committed() {
			continue
		}
		var keys []string
		args := []any{p.rep.now(len(p.items))}
		for j, it := range p.items {
			res := p.rep.result(j)
			if taken := it.Cost + res.Leased; res.Allowed && taken > 0 {
				keys = append(keys, it.Key)
				args = append(args, kindArg(it.Kind), it.Capacity, it.Window.Milliseconds(), taken)
			}
		}
		if len(keys) == 0 {
			continue
		}
		wg.Go(func() {
			if _, err := r.eval(ctx, r.refundSHA, refundLua, keys, args); err != nil {
				r.refundsFailed.Add(1)
				return
			}
			r.refundsGiven.Add(1)
		})
	}
	wg.Wait()
}

// release answers the permits taken for calls that will not be made,
// because another shard's breaker refused. A closed breaker needs no
// answer; a half-open one hands out one permit and waits for its outcome,
// and would refuse every call if none came. So its shard is pinged and
// the outcome recorded, as if that were the probe.
func (r *Redis) release(ctx context.Context, permits map[string]permit) {
	for _, pm := range permits {
		if pm.cb.IsClosed() {
			continue
		}
		node, err := r.cluster.MasterForKey(ctx, pm.key)
		if err == nil {
			err = node.Ping(ctx).Err()
		}
		if err != nil {
			pm.cb.RecordFailure()
		} else {
			pm.cb.RecordSuccess()
		}
	}
}

// Refunds counts refund.lua calls since start: given back, and failed
// (their tokens stay consumed: under-admission, never overshoot).
func (r *Redis) Refunds() (given, failed uint64) {
	return r.refundsGiven.Load(), r.refundsFailed.Load()
}
