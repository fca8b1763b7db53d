package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/portico-io/portico/extauthz/policy"
	authv1 "github.com/portico-io/portico/proto/portico/auth/v1"
)

// chain builds n successive policies over the same keys, each changing
// one key's scopes (so one shard) from the one before.
func chain(t *testing.T, keys []*authv1.ApiKey, n int) []*policy.Policy {
	t.Helper()
	now := time.Now()
	shards := shardMessages(keys)
	var out []*policy.Policy
	var prev *policy.Policy
	for i := range n {
		k := keys[i%len(keys)]
		b := k.GetSha256()[0]
		for j, sk := range shards[b].Keys {
			if sk.GetId() == k.GetId() {
				c := proto.CloneOf(sk)
				c.Scopes = append(c.Scopes, "v"+string(rune('a'+i)))
				shards[b].Keys[j] = c
			}
		}
		p, err := policy.BuildFrom(prev, resourcesWith(string(rune('a'+i)), encode(t, shards)), now)
		if err != nil {
			t.Fatal(err)
		}
		out, prev = append(out, p), p
	}
	return out
}

// sameDecisions fails unless the policy loaded from dir holds exactly
// want's versions and keys.
func sameDecisions(t *testing.T, dir string, want *policy.Policy, keys []*authv1.ApiKey) {
	t.Helper()
	res, err := policy.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := policy.Build(res, time.Now())
	if err != nil {
		t.Fatalf("the persisted policy does not build: %v", err)
	}
	if !got.Complete() || !reflect.DeepEqual(got.Versions, want.Versions) || got.NumKeys() != want.NumKeys() {
		t.Fatalf("loaded versions %v with %d keys, want %v with %d", got.Versions, got.NumKeys(), want.Versions, want.NumKeys())
	}
	for _, k := range keys {
		g, _ := got.Key(sumOf(k))
		w, _ := want.Key(sumOf(k))
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("key %s: loaded %+v, want %+v", k.GetId(), g, w)
		}
	}
}

func shardFiles(t *testing.T, dir string) map[string]os.FileInfo {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]os.FileInfo{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "shard-") || strings.HasPrefix(e.Name(), ".") {
			fi, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			out[e.Name()] = fi
		}
	}
	return out
}

// TestSaverCoalesces: policies handed over while a write is in flight
// coalesce into one write of the newest; a write stores only the shards
// that changed and leaves exactly the files its manifest names; what is on
// disk boots into the newest policy; and the policy pending at shutdown is
// written before Run returns.
func TestSaverCoalesces(t *testing.T) {
	dir := t.TempDir()
	keys := testKeys(2000)
	ps := chain(t, keys, 12)
	// Each write reports itself on saved, then waits for release: the
	// test decides when the next write may start. stop frees the hook
	// when the test ends early.
	saved := make(chan *policy.Policy)
	release, stop := make(chan struct{}), make(chan struct{})
	s, err := policy.NewSaver(policy.SaverConfig{Dir: dir, Saved: func(p *policy.Policy, err error) {
		if err != nil {
			t.Errorf("save: %v", err)
		}
		select {
		case saved <- p:
		case <-stop:
			return
		}
		select {
		case <-release:
		case <-stop:
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		close(stop)
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	nShards := len(ps[0].Raw[policy.ApiKeyShardType].Resources)
	next := func() *policy.Policy {
		t.Helper()
		select {
		case p := <-saved:
			return p
		case <-time.After(30 * time.Second):
			t.Fatal("no write in 30s")
			return nil
		}
	}

	// A stray temporary file and an unnamed shard file, as a crash leaves
	// them: the next write removes them.
	for _, n := range []string{".shard-00.pb.tmp-1", "shard-" + strings.Repeat("0", 64) + ".pb"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	s.Save(ps[0])
	if p := next(); p != ps[0] {
		t.Fatalf("first write: %v", p.Versions)
	}
	before := shardFiles(t, dir)
	if len(before) != nShards {
		t.Fatalf("%d shard files after the first write, want %d", len(before), nShards)
	}
	// The write is held up in the hook: hand over a burst.
	for _, p := range ps[1:10] {
		s.Save(p)
	}
	release <- struct{}{}
	if p := next(); p != ps[9] {
		t.Fatalf("after the burst wrote version %v, want the newest (%v)", p.Versions, ps[9].Versions)
	}
	sameDecisions(t, dir, ps[9], keys)
	after := shardFiles(t, dir)
	if len(after) != nShards {
		t.Fatalf("%d shard files, want %d: unnamed ones left", len(after), nShards)
	}
	kept := 0
	for name, fi := range after {
		if old, ok := before[name]; ok && os.SameFile(old, fi) {
			kept++
		}
	}
	// ps[1..9] changed keys 1..9, in at most nine shards; key 0's shard
	// changed in ps[0], already written.
	if kept < nShards-9 {
		t.Fatalf("only %d shard files kept across the write, want at least %d", kept, nShards-9)
	}

	release <- struct{}{}
	s.Save(ps[10])
	if p := next(); p != ps[10] {
		t.Fatalf("wrote %v, want %v", p.Versions, ps[10].Versions)
	}
	// Shutdown while a policy is pending: Run writes it before returning.
	s.Save(ps[11])
	cancel()
	release <- struct{}{}
	if p := next(); p != ps[11] {
		t.Fatalf("at shutdown wrote %v, want %v", p.Versions, ps[11].Versions)
	}
	sameDecisions(t, dir, ps[11], keys)
}

// TestLoadRefusesDamagedShardFiles: a manifest naming a missing shard file
// or one whose content does not match its name is not loaded.
func TestLoadRefusesDamagedShardFiles(t *testing.T) {
	keys := testKeys(300)
	p := chain(t, keys, 1)[0]
	for name, damage := range map[string]func(path string) error{
		"missing": os.Remove,
		"changed": func(path string) error { return os.WriteFile(path, []byte("not the shard"), 0o600) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := policy.Save(dir, p.Raw, time.Now()); err != nil {
				t.Fatal(err)
			}
			sameDecisions(t, dir, p, keys)
			var victim string
			for n := range shardFiles(t, dir) {
				victim = n
				break
			}
			if err := damage(filepath.Join(dir, victim)); err != nil {
				t.Fatal(err)
			}
			if _, err := policy.Load(dir); !errors.Is(err, policy.ErrBadState) {
				t.Fatalf("err %v, want ErrBadState", err)
			}
		})
	}
}

// TestLoadReadsInlineShards: a policy persisted with every resource inline
// in the manifest (before shard files existed) still loads.
func TestLoadReadsInlineShards(t *testing.T) {
	keys := testKeys(50)
	p := chain(t, keys, 1)[0]
	dir := t.TempDir()
	types := map[string]any{}
	for typ, tr := range p.Raw {
		var inline [][]byte
		for _, a := range tr.Resources {
			b, err := proto.Marshal(a)
			if err != nil {
				t.Fatal(err)
			}
			inline = append(inline, b)
		}
		types[typ] = map[string]any{"version": tr.Version, "resources": inline}
	}
	b, err := json.Marshal(map[string]any{"savedAt": time.Now(), "types": types})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, policy.StateFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	sameDecisions(t, dir, p, keys)
}
