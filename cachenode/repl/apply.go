package repl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"

	"github.com/portico-io/portico/cachenode/dump"
	"github.com/portico-io/portico/cachenode/keyspace"
	"github.com/portico-io/portico/cachenode/namespace"
)

// applier applies one sync session's frames to a replica's registry and
// tracks the stream offset. It is the replica's half of the snapshot
// protocol described in the package comment.
type applier struct {
	reg *namespace.Registry
	m   *Metrics
	log *slog.Logger

	off     int64  // stream offset of pending[0]: everything before is applied
	pending []byte // data bytes not yet making a whole record

	snapshot bool                        // between FULLRESYNC and 'E'
	skip     map[string]*nsSkip          // per namespace, from the shard headers; nil once caught up
	catchUp  int64                       // the largest O_s: past it skip no longer matters
	primary  int64                       // the primary's offset from its last ping
	warned   map[string]struct{}         // namespaces this replica lacks, logged once
	stored   func(ns string, key []byte) // FollowerConfig.Stored, or nil
}

// nsSkip is one namespace's shard layout on the primary and the feed
// offset each shard was copied at.
type nsSkip struct {
	mask int
	offs []int64
}

func newApplier(reg *namespace.Registry, m *Metrics, log *slog.Logger, off int64, full bool) *applier {
	a := &applier{reg: reg, m: m, log: log, off: off, primary: off, warned: map[string]struct{}{}}
	if full {
		a.snapshot, a.skip, a.catchUp = true, map[string]*nsSkip{}, off
	}
	return a
}

// consistent reports whether the replica's data equals the primary's at
// a.off: the snapshot is applied and the stream caught up past every O_s.
func (a *applier) consistent() bool { return !a.snapshot && a.skip == nil }

func (a *applier) frame(tag byte, p []byte) error {
	switch tag {
	case frameShard:
		if !a.snapshot {
			return fmt.Errorf("%w: shard header outside a snapshot", ErrStream)
		}
		return a.shardHeader(p)
	case frameSnapshot:
		if !a.snapshot {
			return fmt.Errorf("%w: snapshot records outside a snapshot", ErrStream)
		}
		for len(p) > 0 {
			r, n, err := dump.ReadRecord(p)
			if err != nil {
				return fmt.Errorf("%w: snapshot record: %w", ErrStream, err)
			}
			a.apply(&r)
			p = p[n:]
		}
	case frameEnd:
		if !a.snapshot {
			return fmt.Errorf("%w: snapshot end outside a snapshot", ErrStream)
		}
		a.snapshot = false
		if a.off >= a.catchUp {
			a.skip = nil
		}
	case frameData:
		if a.snapshot {
			return fmt.Errorf("%w: stream data inside a snapshot", ErrStream)
		}
		return a.data(p)
	case framePing:
		n, k := binary.Uvarint(p)
		if k <= 0 || k != len(p) {
			return fmt.Errorf("%w: bad ping", ErrStream)
		}
		a.primary = int64(n)
	default:
		return fmt.Errorf("%w: unknown frame %q", ErrStream, tag)
	}
	return nil
}

func (a *applier) shardHeader(p []byte) error {
	bad := fmt.Errorf("%w: bad shard header", ErrStream)
	nl, k := binary.Uvarint(p)
	if k <= 0 || nl > uint64(len(p)-k) {
		return bad
	}
	ns := string(p[k : k+int(nl)])
	p = p[k+int(nl):]
	var v [3]uint64
	for i := range v {
		if v[i], k = binary.Uvarint(p); k <= 0 {
			return bad
		}
		p = p[k:]
	}
	shard, shards, at := v[0], v[1], int64(v[2])
	if len(p) != 0 || shards == 0 || shards > keyspace.NumSlots || shards&(shards-1) != 0 || shard >= shards || at < a.off || at > 1<<62 {
		return bad
	}
	s := a.skip[ns]
	if s == nil {
		s = &nsSkip{mask: int(shards) - 1, offs: make([]int64, shards)}
		a.skip[ns] = s
	} else if s.mask != int(shards)-1 {
		return bad
	}
	s.offs[shard] = at
	a.catchUp = max(a.catchUp, at)
	return nil
}

// data applies the whole records in pending+p and keeps the rest.
func (a *applier) data(p []byte) error {
	buf := p
	if len(a.pending) > 0 {
		a.pending = append(a.pending, p...)
		buf = a.pending
	}
	for len(buf) > 0 {
		r, n, err := dump.ReadRecord(buf)
		if errors.Is(err, dump.ErrShort) {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: at offset %d: %w", ErrStream, a.off, err)
		}
		if a.skip != nil && a.off < a.catchUp {
			apply, err := a.catchingUp(&r)
			if err != nil {
				return err
			}
			if apply {
				a.apply(&r)
			}
		} else {
			a.apply(&r)
		}
		a.off += int64(n)
		buf = buf[n:]
	}
	a.pending = append(a.pending[:0], buf...)
	if a.skip != nil && a.off >= a.catchUp {
		a.skip = nil
	}
	return nil
}

// catchingUp decides whether a stream record that starts before the last
// O_s is newer than the snapshot of its key's shard.
func (a *applier) catchingUp(r *dump.Record) (bool, error) {
	s := a.skip[r.NS]
	if s == nil { // namespace not in the snapshot: everything is new
		return true, nil
	}
	if r.Op != dump.OpFlush {
		return a.off >= s.offs[keyspace.Slot(r.Key)&s.mask], nil
	}
	before, after := 0, 0
	for _, o := range s.offs {
		if a.off >= o {
			after++
		} else {
			before++
		}
	}
	switch {
	case before == 0:
		return true, nil
	case after == 0:
		return false, nil
	}
	return false, fmt.Errorf("%w (namespace %q)", ErrResync, r.NS)
}

func (a *applier) apply(r *dump.Record) {
	if err := dump.Apply(a.reg, r, a.reg.Now()); err != nil {
		if _, ok := a.warned[r.NS]; !ok {
			a.warned[r.NS] = struct{}{}
			a.log.Warn("repl: record not applied; is the namespace configured on this replica?", "namespace", r.NS, "err", err)
		}
		return
	}
	a.m.applied.Inc()
	if a.stored != nil && r.Op == dump.OpSet {
		a.stored(r.NS, r.Key)
	}
}
