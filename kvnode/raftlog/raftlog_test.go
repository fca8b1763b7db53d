package raftlog

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestLogRoundTripRangeAndReopen(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if f, _ := s.FirstIndex(); f != 0 {
		t.Fatalf("empty first index %d", f)
	}
	at := time.Unix(1700000000, 123)
	var logs []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 2, Type: raft.LogCommand, Data: []byte{byte(i)}, Extensions: []byte("x"), AppendedAt: at})
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLog(&raft.Log{Index: 11, Term: 3, Type: raft.LogNoop}); err != nil {
		t.Fatal(err)
	}
	var got raft.Log
	if err := s.GetLog(5, &got); err != nil {
		t.Fatal(err)
	}
	if got.Index != 5 || got.Term != 2 || got.Type != raft.LogCommand || !bytes.Equal(got.Data, []byte{5}) || string(got.Extensions) != "x" || !got.AppendedAt.Equal(at) {
		t.Fatalf("round trip: %+v", got)
	}
	if err := s.GetLog(11, &got); err != nil || got.Type != raft.LogNoop || got.Data != nil || !got.AppendedAt.IsZero() {
		t.Fatalf("noop: %+v %v", got, err)
	}
	// Compaction removes a prefix; a conflicting suffix is removed up to max uint64.
	if err := s.DeleteRange(1, 3); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(10, ^uint64(0)); err != nil {
		t.Fatal(err)
	}
	if err := s.GetLog(3, &got); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("deleted entry: %v", err)
	}
	if err := s.Set([]byte("CurrentTerm"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("LastVoteTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir)
	defer s.Close()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != 4 || last != 9 {
		t.Fatalf("after reopen first=%d last=%d, want 4 and 9", first, last)
	}
	if v, err := s.GetUint64([]byte("LastVoteTerm")); err != nil || v != 7 {
		t.Fatalf("uint64 %d %v", v, err)
	}
	if v, err := s.Get([]byte("CurrentTerm")); err != nil || string(v) != "v" {
		t.Fatalf("get %q %v", v, err)
	}
	// raft treats a missing stable key by this exact text.
	if _, err := s.GetUint64([]byte("missing")); err == nil || err.Error() != "not found" {
		t.Fatalf("missing key: %v", err)
	}
}

func TestDecodeRejectsTruncatedEntries(t *testing.T) {
	b := encodeLog(&raft.Log{Index: 9, Term: 1, Type: raft.LogCommand, Data: []byte("hello")})
	for i := 0; i < len(b); i++ {
		var l raft.Log
		if err := decodeLog(b[:i], &l); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("prefix of %d bytes decoded: %v", i, err)
		}
	}
}
