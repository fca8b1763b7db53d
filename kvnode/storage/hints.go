package storage

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"
)

// Hint keys are 'h' | target node id | 0 | created unix ms (8) | sequence (8),
// so one target's hints scan oldest first.

// hintSeq starts at the process start time so hint keys stay unique across
// restarts within one millisecond.
var hintSeq = func() *atomic.Uint64 {
	var v atomic.Uint64
	v.Store(uint64(time.Now().UnixNano()))
	return &v
}()

// Hint is one stored hint.
type Hint struct {
	StorageKey []byte
	Target     string
	Created    time.Time
	Payload    []byte
}

func hintPrefix(target string) []byte {
	return append(append([]byte{prefixHint}, target...), 0)
}

// PutHint durably stores payload for target.
func (s *Store) PutHint(target string, created time.Time, payload []byte) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	k := hintPrefix(target)
	k = binary.BigEndian.AppendUint64(k, uint64(created.UnixMilli()))
	k = binary.BigEndian.AppendUint64(k, hintSeq.Add(1))
	if err := s.db.Set(k, payload, s.wo); err != nil {
		return fmt.Errorf("storage: hint: %w", err)
	}
	return nil
}

// Hints calls fn for target's hints, oldest first, until fn returns false.
func (s *Store) Hints(target string, fn func(Hint) bool) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	p := hintPrefix(target)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return fmt.Errorf("storage: hints: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != len(p)+16 {
			continue
		}
		h := Hint{
			StorageKey: bytes.Clone(k),
			Target:     target,
			Created:    time.UnixMilli(int64(binary.BigEndian.Uint64(k[len(p):]))),
			Payload:    bytes.Clone(it.Value()),
		}
		if !fn(h) {
			break
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("storage: hints: %w", err)
	}
	return nil
}

// HintTargets returns the node ids that have hints, with counts.
func (s *Store) HintTargets() (map[string]int, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixHint}, UpperBound: []byte{prefixHint + 1}})
	if err != nil {
		return nil, fmt.Errorf("storage: hints: %w", err)
	}
	out := map[string]int{}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if i := bytes.IndexByte(k, 0); i > 0 {
			out[string(k[1:i])]++
		}
	}
	return out, it.Close()
}

// DeleteHints removes hints by storage key in one batch.
func (s *Store) DeleteHints(keys [][]byte) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	b := s.db.NewBatch()
	for _, k := range keys {
		_ = b.Delete(k, nil)
	}
	if err := b.Commit(s.wo); err != nil {
		return fmt.Errorf("storage: hints: %w", err)
	}
	return nil
}

func prefixEnd(p []byte) []byte {
	out := bytes.Clone(p)
	for i := len(out) - 1; i >= 0; i-- {
		if out[i] < 0xff {
			out[i]++
			return out[:i+1]
		}
	}
	return nil
}
