package cp

import (
	"context"
	"sort"
	"strings"
)

// Reads of this node's applied state, for kvnode's own bookkeeping kept in
// the group (its API tokens): unlike Get they are never linearized, never
// forwarded and not counted as client requests, so they cost a map lookup
// and may run on every HTTP request. A follower's answer reflects what it
// has applied, which may lag the leader; WaitApplied closes that gap for
// one known revision.

// KeyEntry is one key of LocalScan.
type KeyEntry struct {
	Key string
	Entry
}

// LocalGet returns keyspace/key as this node has applied it (ok false when
// absent).
func (g *Group) LocalGet(keyspace, key string) (Entry, bool) {
	e := g.fsm.get(storeKey(keyspace, key))
	return e, e.Revision != 0
}

// LocalScan returns every key of keyspace this node has applied, sorted by
// key. It walks the whole state: meant for small keyspaces.
func (g *Group) LocalScan(keyspace string) []KeyEntry {
	prefix := storeKey(keyspace, "")
	g.fsm.mu.RLock()
	var out []KeyEntry
	for k, e := range g.fsm.kv {
		if strings.HasPrefix(k, prefix) {
			out = append(out, KeyEntry{Key: k[len(prefix):], Entry: e})
		}
	}
	g.fsm.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// WaitApplied waits until this node has applied the log up to revision rev
// (a revision another node answered with), or ctx ends, or the group
// closes (ErrClosed).
func (g *Group) WaitApplied(ctx context.Context, rev uint64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-g.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := g.fsm.waitApplied(ctx, rev); err != nil {
		select {
		case <-g.done:
			return ErrClosed
		default:
		}
		return err
	}
	return nil
}
