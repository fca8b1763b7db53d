package apitoken

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/authn"
	"github.com/portico-io/portico/kvnode/cp"
)

// memEngine is a leader-only consensus tier in memory, with cp's
// compare-and-set semantics; notLeader makes every write and linearizable
// read fail as on a follower.
type memEngine struct {
	mu        sync.Mutex
	rev       uint64
	kv        map[string]cp.Entry
	notLeader bool
	// beforePut, when set, runs before a Put is applied (a concurrent write).
	beforePut func()
}

func newMemEngine() *memEngine { return &memEngine{kv: map[string]cp.Entry{}} }

func (m *memEngine) Get(_ context.Context, ks, key string, stale bool) (cp.Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.notLeader && !stale {
		return cp.Entry{}, &cp.NotLeaderError{LeaderID: "L", LeaderHTTPAddr: "127.0.0.1:1"}
	}
	e, ok := m.kv[ks+"/"+key]
	if !ok {
		return cp.Entry{}, cp.ErrNotFound
	}
	return e, nil
}

func (m *memEngine) Put(_ context.Context, ks, key string, v []byte, ifRev *uint64, _ uint64) (cp.Entry, error) {
	if f := m.beforePut; f != nil {
		m.beforePut = nil
		f()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.notLeader {
		return cp.Entry{}, &cp.NotLeaderError{LeaderID: "L", LeaderHTTPAddr: "127.0.0.1:1"}
	}
	m.rev++
	cur := m.kv[ks+"/"+key]
	if ifRev != nil && *ifRev != cur.Revision {
		return cur, &cp.ConflictError{Expected: *ifRev, Current: cur.Revision}
	}
	e := cp.Entry{Value: v, Revision: m.rev}
	m.kv[ks+"/"+key] = e
	return e, nil
}

func (m *memEngine) LocalGet(ks, key string) (cp.Entry, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.kv[ks+"/"+key]
	return e, ok
}

func (m *memEngine) LocalScan(ks string) []cp.KeyEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []cp.KeyEntry
	for k, e := range m.kv {
		if key, ok := strings.CutPrefix(k, ks+"/"); ok {
			out = append(out, cp.KeyEntry{Key: key, Entry: e})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func (m *memEngine) WaitApplied(context.Context, uint64) error { return nil }

func TestCreateLookupRevoke(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	e := newMemEngine()
	s := New(e, func() time.Time { return now })
	ctx := context.Background()
	issued := authn.NewToken()
	exp := now.Add(time.Hour)
	tok, rev, err := s.Create(ctx, Token{ID: issued.ID, Name: "orders-app", Roles: []string{"editor"}, Keyspaces: []string{"orders"},
		CreatedBy: "token:x", ExpiresAt: &exp}, issued.Hash)
	if err != nil || rev == 0 || !tok.CreatedAt.Equal(now) || tok.ID != issued.ID {
		t.Fatalf("create: %+v %d %v", tok, rev, err)
	}
	// The stored record holds the hash, never the token.
	raw, _ := e.LocalGet(Keyspace, issued.ID)
	if strings.Contains(string(raw.Value), issued.Plaintext) || strings.Contains(string(raw.Value), issued.Plaintext[len(authn.TokenPrefix)+17:]) {
		t.Fatal("the secret is stored")
	}
	if _, _, err := s.Create(ctx, Token{ID: issued.ID, Name: "again"}, issued.Hash); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate id: %v", err)
	}

	// A real Authenticator over the store: confined principal, then
	// revoked, then (another token) expired.
	var clock = now
	a, err := authn.New(authn.Config{Tokens: s, TimeNow: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Authenticate(bearer(issued.Plaintext))
	if err != nil || p.Kind != authn.KindToken || p.ID != issued.ID || strings.Join(p.Keyspaces, ",") != "orders" || strings.Join(p.Roles, ",") != "editor" {
		t.Fatalf("authenticate: %+v %v", p, err)
	}
	if got, err := s.Get(issued.ID); err != nil || got.LastUsedAt == nil || !got.LastUsedAt.Equal(now) {
		t.Fatalf("last use not recorded: %+v %v", got, err)
	}
	clock = now.Add(2 * time.Hour)
	if _, err := a.Authenticate(bearer(issued.Plaintext)); !errors.Is(err, authn.ErrExpired) {
		t.Fatalf("expired token: %v", err)
	}
	clock = now

	got, rrev, err := s.Revoke(ctx, issued.ID, "token:admin")
	if err != nil || rrev <= rev || got.RevokedAt == nil || got.RevokedBy != "token:admin" {
		t.Fatalf("revoke: %+v %d %v", got, rrev, err)
	}
	if _, err := a.Authenticate(bearer(issued.Plaintext)); !errors.Is(err, authn.ErrRevoked) {
		t.Fatalf("revoked token: %v", err)
	}
	// Revoking again keeps the first revocation.
	now = now.Add(time.Minute)
	again, arev, err := s.Revoke(ctx, issued.ID, "token:other")
	if err != nil || arev != rrev || again.RevokedBy != "token:admin" || !again.RevokedAt.Equal(*got.RevokedAt) {
		t.Fatalf("second revoke: %+v %d %v", again, arev, err)
	}
	if _, _, err := s.Revoke(ctx, "0123456789abcdef", "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoke unknown: %v", err)
	}
	if _, err := s.Get("0123456789abcdef"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
	if _, err := s.LookupToken(ctx, "0123456789abcdef"); !errors.Is(err, authn.ErrTokenNotFound) {
		t.Fatalf("lookup unknown: %v", err)
	}
}

// A revocation racing another write to the token retries on the new
// revision; writes off the leader return *cp.NotLeaderError for the HTTP
// layer to forward; a record that does not decode fails lookups.
func TestRevokeRetriesAndErrors(t *testing.T) {
	e := newMemEngine()
	s := New(e, nil)
	ctx := context.Background()
	issued := authn.NewToken()
	if _, _, err := s.Create(ctx, Token{ID: issued.ID, Name: "n", Roles: []string{"viewer"}}, issued.Hash); err != nil {
		t.Fatal(err)
	}
	e.beforePut = func() {
		cur, _ := e.LocalGet(Keyspace, issued.ID)
		_, _ = e.Put(ctx, Keyspace, issued.ID, cur.Value, nil, 0)
	}
	if got, _, err := s.Revoke(ctx, issued.ID, "me"); err != nil || got.RevokedAt == nil {
		t.Fatalf("revoke after a concurrent write: %+v %v", got, err)
	}

	e.notLeader = true
	var nl *cp.NotLeaderError
	if _, _, err := s.Create(ctx, Token{ID: "0123456789abcdef", Name: "n"}, issued.Hash); !errors.As(err, &nl) {
		t.Fatalf("create on a follower: %v", err)
	}
	if _, _, err := s.Revoke(ctx, issued.ID, "me"); !errors.As(err, &nl) {
		t.Fatalf("revoke on a follower: %v", err)
	}
	// Reads are local, on any node.
	if _, err := s.Get(issued.ID); err != nil {
		t.Fatalf("get on a follower: %v", err)
	}
	e.notLeader = false

	_, _ = e.Put(ctx, Keyspace, "fedcba9876543210", []byte("{not json"), nil, 0)
	if _, err := s.LookupToken(ctx, "fedcba9876543210"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt record: %v", err)
	}
}

func TestListPages(t *testing.T) {
	e := newMemEngine()
	s := New(e, nil)
	var ids []string
	for i := range 5 {
		id := fmt.Sprintf("%016x", i+1)
		ids = append(ids, id)
		if _, _, err := s.Create(context.Background(), Token{ID: id, Name: "t", Roles: []string{"viewer"}}, [32]byte{}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		items, next, err := s.List(cursor, 2)
		if err != nil || pages > 3 {
			t.Fatalf("page %d: %v", pages, err)
		}
		for _, it := range items {
			got = append(got, it.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Fatalf("listed %v, want %v", got, ids)
	}
	if items, next, _ := s.List("", 0); len(items) != 5 || next != "" {
		t.Fatalf("default page: %d items, next %q", len(items), next)
	}
	if items, _, _ := s.List(ids[4], 0); items == nil || len(items) != 0 {
		t.Fatalf("past the end: %v", items)
	}
}

func bearer(tok string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	return r
}
