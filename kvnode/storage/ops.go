package storage

import (
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble"

	"github.com/portico-io/portico/kvnode/ring"
)

// Checkpoint writes a consistent point-in-time copy of the whole store
// (data, hints, metadata) to dir, which must not exist yet: pebble hard
// links the immutable SSTables (dir should be on the same filesystem) and
// copies the WAL, flushed first, so every write applied before the call is
// in the copy, whatever Options.NoSync says. The copy opens with Open.
func (s *Store) Checkpoint(dir string) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	if err := s.db.Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		return fmt.Errorf("storage: checkpoint: %w", err)
	}
	return nil
}

// Cleaned is what DeleteOutside removed.
type Cleaned struct {
	Deleted int
	spans   [][2][]byte
}

// DeleteOutside deletes every data key whose token lies in none of keep
// (the ranges this replica still owns) and reports how many it deleted;
// hints and metadata are not touched. The deletion is range tombstones:
// CompactCleaned then returns the space. The caller guarantees no write
// for a deleted span is in flight (the node owns none of them).
func (s *Store) DeleteOutside(keep []ring.Range) (Cleaned, error) {
	var cl Cleaned
	if err := s.enter(); err != nil {
		return cl, err
	}
	defer s.life.RUnlock()
	for _, gap := range gaps(keep) {
		for _, sp := range spans(gap) {
			lo, hi := dataBound(sp[0], false), dataBound(sp[1], true)
			it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
			if err != nil {
				return cl, fmt.Errorf("storage: iter: %w", err)
			}
			c := 0
			for ok := it.First(); ok; ok = it.Next() {
				c++
			}
			if err := it.Close(); err != nil {
				return cl, fmt.Errorf("storage: iter: %w", err)
			}
			if c == 0 {
				continue
			}
			if err := s.db.DeleteRange(lo, hi, s.wo); err != nil {
				return cl, fmt.Errorf("storage: cleanup: %w", err)
			}
			cl.Deleted += c
			cl.spans = append(cl.spans, [2][]byte{lo, hi})
		}
	}
	return cl, nil
}

// CompactCleaned compacts the spans DeleteOutside deleted, returning their
// space now rather than at some later compaction.
func (s *Store) CompactCleaned(cl Cleaned) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	for _, sp := range cl.spans {
		if err := s.db.Compact(sp[0], sp[1], false); err != nil {
			return fmt.Errorf("storage: cleanup compaction: %w", err)
		}
	}
	return nil
}

// gaps returns the token ranges covered by none of keep (which may be in
// any order and may touch). Keeping nothing drops the whole ring; keeping
// a whole-ring range drops nothing.
func gaps(keep []ring.Range) []ring.Range {
	if len(keep) == 0 {
		return []ring.Range{{Start: 0, End: 0}}
	}
	// Mark each range's boundary tokens, walk the ring in token order and
	// emit every stretch (prev, next] that no kept range contains.
	var bounds []uint64
	for _, k := range keep {
		if k.Start == k.End {
			return nil
		}
		bounds = append(bounds, k.Start, k.End)
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	var out []ring.Range
	for i, end := range bounds {
		start := bounds[(i+len(bounds)-1)%len(bounds)]
		seg := ring.Range{Start: start, End: end}
		kept := false
		for _, k := range keep {
			// Segments never straddle a boundary, so containing the
			// segment's end token means containing the segment.
			if k.Contains(end) && k.Contains(seg.Start+1) {
				kept = true
				break
			}
		}
		if !kept {
			out = append(out, seg)
		}
	}
	return out
}
