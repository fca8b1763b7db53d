// Package storage keeps a kvnode replica's data in pebble: sibling sets
// under their ring token (so a token range is one contiguous scan), hints
// for other replicas, and node metadata. Pebble provides the commit log,
// memtable, SSTables and bloom filters; this package adds the per-key
// read-merge-write that makes replica writes idempotent and commutative.
package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"

	"github.com/portico-io/portico/kvnode/record"
	"github.com/portico-io/portico/kvnode/ring"
	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// Key prefixes. Data keys are 'd' | token (8 bytes, big-endian) | user key.
const (
	prefixData = 'd'
	prefixHint = 'h'
	prefixMeta = 'm'
)

// ErrClosed is returned after Close.
var ErrClosed = errors.New("storage: closed")

// Options configures Open. Zero values take the defaults.
type Options struct {
	// NoSync acknowledges writes before the commit log is fsynced. Only for
	// tests and benchmarks that measure something else.
	NoSync bool
	// CacheBytes sizes pebble's block cache (default 64 MiB).
	CacheBytes int64
}

// Store is safe for concurrent use.
type Store struct {
	// life guards db against use after Close: pebble panics then, and
	// background work (replication fan-out, hint writes) may outlive a
	// request by a little during shutdown.
	life   sync.RWMutex
	closed bool
	db     *pebble.DB
	wo     *pebble.WriteOptions
	locks  [256]sync.Mutex
	seed   maphash.Seed
}

// Open opens (creating if needed) the store in dir.
func Open(dir string, o Options) (*Store, error) {
	if o.CacheBytes <= 0 {
		o.CacheBytes = 64 << 20
	}
	cache := pebble.NewCache(o.CacheBytes)
	defer cache.Unref()
	opts := &pebble.Options{Cache: cache, Logger: quietLogger{}}
	opts.Levels = make([]pebble.LevelOptions, 7)
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		opts.Levels[i].FilterType = pebble.TableFilter
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", dir, err)
	}
	wo := pebble.Sync
	if o.NoSync {
		wo = pebble.NoSync
	}
	return &Store{db: db, wo: wo, seed: maphash.MakeSeed()}, nil
}

// Close waits for operations in progress; later ones get ErrClosed. Every
// acknowledged write is already in the commit log.
func (s *Store) Close() error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.db.Close()
}

// enter marks an operation in progress; the caller must call s.life.RUnlock.
func (s *Store) enter() error {
	s.life.RLock()
	if s.closed {
		s.life.RUnlock()
		return ErrClosed
	}
	return nil
}

// DataKey is the storage key of a user key.
func DataKey(key []byte) []byte {
	out := make([]byte, 9+len(key))
	out[0] = prefixData
	binary.BigEndian.PutUint64(out[1:], ring.Token(key))
	copy(out[9:], key)
	return out
}

func (s *Store) lock(key []byte) *sync.Mutex {
	return &s.locks[maphash.Bytes(s.seed, key)%uint64(len(s.locks))]
}

// Get returns the stored sibling set of key (nil when absent).
func (s *Store) Get(key []byte) ([]*kvv1.Record, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	return s.get(DataKey(key))
}

func (s *Store) get(dk []byte) ([]*kvv1.Record, error) {
	v, closer, err := s.db.Get(dk)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("storage: get: %w", err)
	}
	defer closer.Close()
	return record.Decode(v)
}

// Apply merges recs into the stored set of key and returns the result.
// Applying the same records twice, or in any order, ends in the same state.
func (s *Store) Apply(key []byte, recs []*kvv1.Record) ([]*kvv1.Record, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	dk := DataKey(key)
	mu := s.lock(key)
	mu.Lock()
	defer mu.Unlock()
	cur, err := s.get(dk)
	if err != nil {
		return nil, err
	}
	merged := record.Merge(cur, recs)
	if cur != nil && record.Equal(cur, merged) {
		return merged, nil
	}
	v, err := record.Encode(merged)
	if err != nil {
		return nil, err
	}
	if err := s.db.Set(dk, v, s.wo); err != nil {
		return nil, fmt.Errorf("storage: set: %w", err)
	}
	return merged, nil
}

// Entry is one key and its sibling set, as scanned.
type Entry struct {
	StorageKey []byte
	Key        []byte
	Token      uint64
	Records    []*kvv1.Record
}

// Scan calls fn for every key in token range rg (in token order), starting
// after storage key after (nil = from the start). Keys whose every record is
// dead since before gcBefore are skipped: their grace period has passed and
// they must not be streamed back to a replica that already dropped them.
// fn returning false stops the scan.
func (s *Store) Scan(rg ring.Range, after []byte, gcBefore time.Time, fn func(Entry) bool) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	for _, span := range spans(rg) {
		lo, hi := dataBound(span[0], false), dataBound(span[1], true)
		if after != nil {
			if bytes.Compare(after, hi) >= 0 {
				continue
			}
			if bytes.Compare(after, lo) >= 0 {
				lo = append(bytes.Clone(after), 0)
			}
		}
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return fmt.Errorf("storage: iter: %w", err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			recs, err := record.Decode(it.Value())
			if err != nil {
				it.Close()
				return err
			}
			if record.Purgeable(recs, gcBefore) {
				continue
			}
			k := it.Key()
			e := Entry{StorageKey: bytes.Clone(k), Key: bytes.Clone(k[9:]), Token: binary.BigEndian.Uint64(k[1:9]), Records: recs}
			if !fn(e) {
				it.Close()
				return nil
			}
		}
		if err := it.Close(); err != nil {
			return fmt.Errorf("storage: iter: %w", err)
		}
	}
	return nil
}

// spans splits (start, end] into inclusive token intervals without wrap.
func spans(rg ring.Range) [][2]uint64 {
	if rg.Start == rg.End {
		return [][2]uint64{{0, ^uint64(0)}}
	}
	if rg.Start < rg.End {
		return [][2]uint64{{rg.Start + 1, rg.End}}
	}
	out := [][2]uint64{}
	if rg.Start != ^uint64(0) {
		out = append(out, [2]uint64{rg.Start + 1, ^uint64(0)})
	}
	return append(out, [2]uint64{0, rg.End})
}

// dataBound is the storage key bounding token t: inclusive lower bound, or
// exclusive upper bound past every key of token t.
func dataBound(t uint64, upper bool) []byte {
	b := make([]byte, 9)
	b[0] = prefixData
	if upper {
		if t == ^uint64(0) {
			return []byte{prefixData + 1}
		}
		t++
	}
	binary.BigEndian.PutUint64(b[1:], t)
	return b
}

// Purge deletes keys whose grace period has passed (tombstones and expired
// values dead since before gcBefore) and returns how many it dropped.
func (s *Store) Purge(gcBefore time.Time) (int, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.life.RUnlock()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixData}, UpperBound: []byte{prefixData + 1}})
	if err != nil {
		return 0, fmt.Errorf("storage: iter: %w", err)
	}
	var victims [][]byte
	for ok := it.First(); ok; ok = it.Next() {
		recs, err := record.Decode(it.Value())
		if err == nil && record.Purgeable(recs, gcBefore) {
			victims = append(victims, bytes.Clone(it.Key()))
		}
	}
	if err := it.Close(); err != nil {
		return 0, fmt.Errorf("storage: iter: %w", err)
	}
	n := 0
	for _, dk := range victims {
		key := dk[9:]
		mu := s.lock(key)
		mu.Lock()
		recs, err := s.get(dk)
		if err == nil && record.Purgeable(recs, gcBefore) {
			err = s.db.Delete(dk, s.wo)
			n++
		}
		mu.Unlock()
		if err != nil {
			return n, fmt.Errorf("storage: purge: %w", err)
		}
	}
	return n, nil
}

// Count returns the number of data keys (live or not); for tests and metrics.
func (s *Store) Count() (int, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.life.RUnlock()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixData}, UpperBound: []byte{prefixData + 1}})
	if err != nil {
		return 0, err
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n, it.Close()
}

// GetMeta reads a metadata value (nil when absent).
func (s *Store) GetMeta(name string) ([]byte, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	v, closer, err := s.db.Get(append([]byte{prefixMeta}, name...))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("storage: meta: %w", err)
	}
	defer closer.Close()
	return bytes.Clone(v), nil
}

// PutMeta durably writes a metadata value.
func (s *Store) PutMeta(name string, v []byte) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	if err := s.db.Set(append([]byte{prefixMeta}, name...), v, pebble.Sync); err != nil {
		return fmt.Errorf("storage: meta: %w", err)
	}
	return nil
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
