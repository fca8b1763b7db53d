package cp

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// MaxHistory bounds the change history kept for watches (events); older
// revisions are compacted and a watch from before them gets
// *CompactedError.
const MaxHistory = 10000

// Event is one change, in log order.
type Event struct {
	Revision uint64 `json:"revision"`
	Type     Op     `json:"type"` // OpPut or OpDelete
	Key      string `json:"key"`  // keyspace + "/" + key inside the FSM; the key alone on the API
	Value    []byte `json:"value,omitempty"`
}

// CompactedError: the history no longer holds FromRevision; it is
// complete from FirstRevision on (read the current state, then watch from
// its revision + 1).
type CompactedError struct {
	FromRevision, FirstRevision uint64
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("cp: revision %d is compacted; history starts at %d", e.FromRevision, e.FirstRevision)
}

func (e *CompactedError) Unwrap() error { return ErrCompacted }

// record appends an event; f.mu must be held.
func (f *fsm) record(e Event) {
	f.events = append(f.events, e)
	f.dirty = true
	if len(f.events) > MaxHistory {
		// Drop the older half, whole revisions only.
		cut := len(f.events) / 2
		last := f.events[cut-1].Revision
		for cut < len(f.events) && f.events[cut].Revision == last {
			cut++
		}
		f.events = append([]Event(nil), f.events[cut:]...)
		f.firstRev = last + 1
	}
}

// notify wakes watchers if anything changed, and readers waiting for an
// applied index; f.mu must be held.
func (f *fsm) notify() {
	if f.appliedWait {
		close(f.appliedCh)
		f.appliedCh = make(chan struct{})
		f.appliedWait = false
	}
	if f.dirty {
		close(f.changed)
		f.changed = make(chan struct{})
		f.dirty = false
	}
}

// watch calls send with each batch of events on keys of keyspace starting
// with prefix, from revision from (0 = from the next change on), in order,
// each event once, until ctx ends or send fails. The first call may carry
// no events (the watch is established). Events of one revision are
// always in one batch, so resuming from the last revision received + 1
// misses nothing and repeats nothing.
func (f *fsm) watch(ctx context.Context, keyspace, prefix string, from uint64, send func([]Event) error) error {
	full := storeKey(keyspace, prefix)
	for first := true; ; first = false {
		f.mu.RLock()
		if from == 0 {
			from = f.applied + 1
		}
		if from < f.firstRev {
			first := f.firstRev
			f.mu.RUnlock()
			return &CompactedError{FromRevision: from, FirstRevision: first}
		}
		i := sort.Search(len(f.events), func(i int) bool { return f.events[i].Revision >= from })
		var batch []Event
		for _, e := range f.events[i:] {
			if strings.HasPrefix(e.Key, full) {
				e.Key = e.Key[len(keyspace)+1:]
				batch = append(batch, e)
			}
		}
		next, changed := f.applied+1, f.changed
		f.mu.RUnlock()
		if len(batch) > 0 || first {
			if err := send(batch); err != nil {
				return err
			}
		}
		from = max(from, next)
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Watch streams changes to keys of keyspace starting with prefix from
// revision from (0 = only new changes), served from this node's state (a
// follower's stream may lag the leader's but never skips or reorders).
// Watches end when the group closes.
func (g *Group) Watch(ctx context.Context, keyspace, prefix string, from uint64, send func([]Event) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-g.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := g.fsm.watch(ctx, keyspace, prefix, from, send); err != nil {
		select {
		case <-g.done:
			return ErrClosed
		default:
		}
		return err
	}
	return nil
}
