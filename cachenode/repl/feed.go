// Package repl is asynchronous primary→replica replication for cache
// nodes, in the spirit of Redis's: a primary's Feed turns every keyspace
// change into a dump record in a backlog ring buffer addressed by a
// monotonic byte offset under a replication id; a replica's Follower
// connects to the primary's bus port with SYNC <replid> <offset>, and
// either continues from its offset (the replid matches and the offset is
// still in the backlog) or gets a full resync: a snapshot followed by the
// stream.
//
// The snapshot is taken without stopping the primary: it notes the feed
// offset X, then copies one lock shard at a time, recording the feed
// offset O_s at the moment shard s is locked. Every change to a key of s
// logged before O_s is in the copy and every one after is not, so the
// replica applies the snapshot, then the stream from X, skipping records
// for keys of shard s that start before O_s. A flush of a namespace in the
// middle of its copy cannot be reconciled per shard, and makes the
// replica sync again.
//
// Replication is asynchronous: a primary acknowledges writes before
// replicas have them, and a failover loses what the replicas had not
// received. Promote gives the node a new replication id, so its own
// replicas (old siblings included) full-sync from it; there is no partial
// resync across a failover (Redis's replid2).
package repl

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"

	"github.com/portico-io/portico/cachenode/dump"
	"github.com/portico-io/portico/cachenode/keyspace"
)

// DefaultBacklogBytes is the default backlog size (Redis's default is
// 1 MB; a cache node sees bursts of large values and replicas that restart).
const DefaultBacklogBytes = 64 << 20

// FeedConfig configures a Feed.
type FeedConfig struct {
	// BacklogBytes is the ring buffer size (default DefaultBacklogBytes).
	// It is allocated as it fills.
	BacklogBytes int
}

// Feed is a keyspace.Observer that logs every change as a dump record into
// the replication backlog. Safe for concurrent use; appends from all shard
// locks serialize on one mutex, held only for the copy into the ring.
//
// A change is logged as the key's whole new value (a state, not the
// command), so applying records is idempotent and only their order per key
// matters, which is what lets a snapshot overlap the stream. The price is
// that a write to a large list, set or hash logs the whole container.
// (The encoding runs under the key's shard lock, before the mutex.)
//
// Like Redis's backlog, the feed logs nothing until the first replica
// asks to sync: a primary without replicas pays one atomic load per
// change. Skipping those changes is safe because a first sync is always a
// full one, whose snapshot holds them.
type Feed struct {
	size   int
	pool   sync.Pool
	active atomic.Bool // set by the first SYNC, never cleared

	mu      sync.Mutex
	buf     []byte // ring; grows to size, then wraps
	start   int64  // oldest offset still in buf
	end     int64  // next offset: master_repl_offset
	replid  string
	wake    chan struct{} // closed on the next append when waiting is set
	waiting bool
}

var _ keyspace.Observer = (*Feed)(nil)

// NewFeed returns an empty feed with a fresh replication id.
func NewFeed(cfg FeedConfig) *Feed {
	if cfg.BacklogBytes <= 0 {
		cfg.BacklogBytes = DefaultBacklogBytes
	}
	f := &Feed{size: cfg.BacklogBytes, replid: newReplID(), wake: make(chan struct{})}
	f.pool.New = func() any { b := make([]byte, 0, 512); return &b }
	return f
}

func newReplID() string {
	var b [20]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// Changed logs key's new state (keyspace.Observer).
func (f *Feed) Changed(db *keyspace.DB, key []byte, e *keyspace.Entry) {
	if !f.active.Load() {
		return
	}
	op := dump.OpSet
	if e == nil {
		op = dump.OpDel
	}
	bp := f.pool.Get().(*[]byte)
	*bp = dump.AppendRecord((*bp)[:0], op, db.Name(), key, e)
	f.append(*bp)
	if cap(*bp) <= 64<<10 { // do not keep a big value's buffer around
		f.pool.Put(bp)
	}
}

// Flushed logs a namespace flush (keyspace.Observer).
func (f *Feed) Flushed(db *keyspace.DB) {
	if !f.active.Load() {
		return
	}
	f.append(dump.AppendRecord(nil, dump.OpFlush, db.Name(), nil, nil))
}

func (f *Feed) append(rec []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(rec) >= f.size {
		// Larger than the whole backlog: it cannot be streamed, so every
		// reader is now behind and must full-sync.
		f.end += int64(len(rec))
		f.start = f.end
		f.signal()
		return
	}
	for len(rec) > 0 {
		i := int(f.end % int64(f.size))
		if len(f.buf) < f.size {
			if i == len(f.buf) {
				n := min(len(rec), f.size-len(f.buf))
				if len(f.buf)+n > cap(f.buf) {
					// Double (append grows big slices by 1.25x, which
					// copies the backlog many times over while it fills).
					nb := make([]byte, len(f.buf), min(f.size, max(2*cap(f.buf), len(f.buf)+n, 64<<10)))
					copy(nb, f.buf)
					f.buf = nb
				}
				f.buf = append(f.buf, rec[:n]...)
				rec, f.end = rec[n:], f.end+int64(n)
				continue
			}
			// The offsets jumped (an oversized record): go to full size.
			f.buf = append(f.buf, make([]byte, f.size-len(f.buf))...)
		}
		n := copy(f.buf[i:], rec)
		rec, f.end = rec[n:], f.end+int64(n)
	}
	f.start = max(f.start, f.end-int64(f.size))
	f.signal()
}

func (f *Feed) signal() {
	if f.waiting {
		close(f.wake)
		f.wake = make(chan struct{})
		f.waiting = false
	}
}

// Activate starts logging (the first SYNC calls it). Every change that
// completes after it returns is logged; one that raced with it may not
// be, but it is in any snapshot taken after Activate.
func (f *Feed) Activate() { f.active.Store(true) }

// Position is the replication id and the offset of the next change.
func (f *Feed) Position() (replid string, offset int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.replid, f.end
}

// Offset is the offset of the next change. Read under a shard lock, it
// separates that shard's changes already logged from later ones.
func (f *Feed) Offset() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.end
}

// Backlog is the range of offsets [start, end) the backlog holds.
func (f *Feed) Backlog() (start, end int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.start, f.end
}

// Promote gives the feed a new replication id (the node becomes a primary
// after a failover) and returns it. Offsets go on from where they were.
func (f *Feed) Promote() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replid = newReplID()
	return f.replid
}

// ReadAt copies backlog bytes from offset off into p. It returns 0 when
// nothing past off is logged yet, and ErrBehind when off is no longer (or
// not yet) in the backlog.
func (f *Feed) ReadAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if off < f.start || off > f.end {
		return 0, ErrBehind
	}
	n := int(min(int64(len(p)), f.end-off))
	for done := 0; done < n; {
		i := int((off + int64(done)) % int64(f.size))
		done += copy(p[done:n], f.buf[i:])
	}
	return n, nil
}

// Wait blocks until something past off is logged or ctx ends.
func (f *Feed) Wait(ctx context.Context, off int64) error {
	f.mu.Lock()
	if f.end > off {
		f.mu.Unlock()
		return nil
	}
	f.waiting = true
	ch := f.wake
	f.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
