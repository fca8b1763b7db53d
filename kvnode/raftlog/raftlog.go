// Package raftlog is the Raft log and stable store of kvnode's consensus
// tier, on pebble (already the node's storage engine), so the tier needs no
// second embedded database. It implements raft.LogStore and
// raft.StableStore. Every write is fsynced unless Options.NoSync is set.
// A Store is safe for concurrent use.
package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/hashicorp/raft"
)

// ErrNotFound is returned by Get and GetUint64 for a missing key. Its text
// is exactly "not found" because hashicorp/raft recognises a missing
// stable-store key by that text (raft.go: err.Error() != "not found").
var ErrNotFound = errors.New("not found")

// ErrCorrupt is a log entry that does not decode.
var ErrCorrupt = errors.New("raftlog: corrupt log entry")

var (
	_ raft.LogStore    = (*Store)(nil)
	_ raft.StableStore = (*Store)(nil)
)

const (
	prefixLog    byte = 'l'
	prefixStable byte = 's'
)

// Options configure Open.
type Options struct {
	// NoSync acknowledges writes before fsync (tests and benchmarks only:
	// Raft's safety needs the log and term on disk before it answers).
	NoSync bool
	// Logger receives pebble's messages (informational ones at debug).
	Logger *slog.Logger
}

// Store is a pebble-backed raft.LogStore and raft.StableStore.
type Store struct {
	db *pebble.DB
	wo *pebble.WriteOptions
}

// Open opens (or creates) the store in dir.
func Open(dir string, o Options) (*Store, error) {
	l := o.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{l}})
	if err != nil {
		return nil, fmt.Errorf("raftlog: open %s: %w", dir, err)
	}
	wo := pebble.Sync
	if o.NoSync {
		wo = pebble.NoSync
	}
	return &Store{db: db, wo: wo}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

func logKey(index uint64) []byte {
	k := make([]byte, 9)
	k[0] = prefixLog
	binary.BigEndian.PutUint64(k[1:], index)
	return k
}

func (s *Store) edge(first bool) (uint64, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixLog}, UpperBound: []byte{prefixLog + 1}})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	ok := false
	if first {
		ok = it.First()
	} else {
		ok = it.Last()
	}
	if !ok {
		return 0, it.Error()
	}
	return binary.BigEndian.Uint64(it.Key()[1:]), nil
}

// FirstIndex is the first index written, 0 for an empty log.
func (s *Store) FirstIndex() (uint64, error) { return s.edge(true) }

// LastIndex is the last index written, 0 for an empty log.
func (s *Store) LastIndex() (uint64, error) { return s.edge(false) }

// GetLog reads the entry at index into log (raft.ErrLogNotFound if absent).
func (s *Store) GetLog(index uint64, log *raft.Log) error {
	v, closer, err := s.db.Get(logKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return err
	}
	defer closer.Close()
	return decodeLog(v, log)
}

// StoreLog stores one entry.
func (s *Store) StoreLog(log *raft.Log) error { return s.StoreLogs([]*raft.Log{log}) }

// StoreLogs stores entries atomically.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	b := s.db.NewBatch()
	defer b.Close()
	for _, l := range logs {
		if err := b.Set(logKey(l.Index), encodeLog(l), nil); err != nil {
			return err
		}
	}
	return b.Commit(s.wo)
}

// DeleteRange deletes entries min..max inclusive.
func (s *Store) DeleteRange(min, max uint64) error {
	if max < min {
		return nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	var end []byte
	if max == ^uint64(0) {
		end = []byte{prefixLog + 1}
	} else {
		end = logKey(max + 1)
	}
	if err := b.DeleteRange(logKey(min), end, nil); err != nil {
		return err
	}
	return b.Commit(s.wo)
}

func stableKey(k []byte) []byte { return append([]byte{prefixStable}, k...) }

// Set stores a stable key.
func (s *Store) Set(key, val []byte) error { return s.db.Set(stableKey(key), val, s.wo) }

// Get reads a stable key (ErrNotFound when missing).
func (s *Store) Get(key []byte) ([]byte, error) {
	v, closer, err := s.db.Get(stableKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// SetUint64 stores a stable uint64.
func (s *Store) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 reads a stable uint64 (0 and ErrNotFound when missing).
func (s *Store) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("raftlog: stable key %q holds %d bytes, want 8", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// Entry layout: index, term (uvarint), type (1 byte), appendedAt (varint
// unix ns, 0 = zero time), data and extensions (uvarint length + bytes).
func encodeLog(l *raft.Log) []byte {
	b := make([]byte, 0, 32+len(l.Data)+len(l.Extensions))
	b = binary.AppendUvarint(b, l.Index)
	b = binary.AppendUvarint(b, l.Term)
	b = append(b, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b = binary.AppendVarint(b, at)
	b = binary.AppendUvarint(b, uint64(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.AppendUvarint(b, uint64(len(l.Extensions)))
	b = append(b, l.Extensions...)
	return b
}

func decodeLog(b []byte, l *raft.Log) error {
	var n int
	uv := func() uint64 {
		if n < 0 {
			return 0
		}
		v, k := binary.Uvarint(b)
		if k <= 0 {
			n = -1
			return 0
		}
		b = b[k:]
		return v
	}
	bytesField := func() []byte {
		ln := uv()
		if n < 0 || ln > uint64(len(b)) {
			n = -1
			return nil
		}
		var out []byte
		if ln > 0 {
			out = append([]byte(nil), b[:ln]...)
		}
		b = b[ln:]
		return out
	}
	l.Index = uv()
	l.Term = uv()
	if n < 0 || len(b) < 1 {
		return ErrCorrupt
	}
	l.Type = raft.LogType(b[0])
	b = b[1:]
	at, k := binary.Varint(b)
	if k <= 0 {
		return ErrCorrupt
	}
	b = b[k:]
	l.AppendedAt = time.Time{}
	if at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	l.Data = bytesField()
	l.Extensions = bytesField()
	if n < 0 || len(b) != 0 {
		return ErrCorrupt
	}
	return nil
}

// pebbleLogger adapts slog to pebble's logger.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug("raftlog: " + fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("raftlog: " + fmt.Sprintf(format, args...))
}

// Fatalf must not return (pebble's contract): the store is unusable.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error("raftlog: fatal: " + msg)
	panic("raftlog: " + msg)
}
