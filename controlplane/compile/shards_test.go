package compile

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/portico-io/portico/controlplane/spec"
)

func hashOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// withKeys returns the echo config plus n keys of consumer acme.
func withKeys(t testing.TB, n int) (*spec.Config, Options) {
	t.Helper()
	cfg, opts := loadCase(t, "testdata/in/minimal_echo.yaml")
	cfg.Consumers.Set("acme", &spec.Consumer{Name: "acme", Tenant: "acme"})
	cfg.Consumers.Set("globex", &spec.Consumer{Name: "globex", Tenant: "globex"})
	for i := range n {
		id := fmt.Sprintf("k%06d", i)
		cons := "acme"
		if i%10 == 0 {
			cons = "globex"
		}
		cfg.APIKeys.Set(id, &spec.APIKey{Name: id, Consumer: cons, SHA256: hashOf(id)})
	}
	return cfg, opts
}

// next is cfg's successor sharing every value, as the store's versions do.
func next(cfg *spec.Config) *spec.Config {
	c := *cfg
	c.Version++
	c.APIKeys, c.Consumers = cfg.APIKeys.Clone(), cfg.Consumers.Clone()
	return &c
}

// incrementalStep compiles cfg after *state (the previous step's) and
// checks the result against a full compile; *state becomes this step's.
func incrementalStep(t *testing.T, name string, state **compileState, cfg *spec.Config, opts Options) (*Snapshot, *reuseCache) {
	t.Helper()
	sc := &reuseCache{prev: *state}
	got, err := compileConfig(cfg, opts, sc)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	want, err := Compile(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !Equal(got, want) {
		t.Fatalf("%s: incremental compile differs from a full one", name)
	}
	*state = sc.next
	return got, sc
}

// The incremental compile equals a full compile after every kind of
// change, and rebuilds only the shards the change touches.
func TestCompilerReusesUnchangedShards(t *testing.T) {
	cfg, opts := withKeys(t, 3000)
	var state *compileState
	step := func(name string, cfg *spec.Config, wantRebuilt int) {
		t.Helper()
		_, sc := incrementalStep(t, name, &state, cfg, opts)
		if wantRebuilt >= 0 && sc.rebuilt != wantRebuilt {
			t.Fatalf("%s: rebuilt %d shards, want %d", name, sc.rebuilt, wantRebuilt)
		}
	}
	step("first", cfg, numShards)
	step("nothing changed", next(cfg), 0)

	cfg = next(cfg)
	cfg.APIKeys.Set("new", &spec.APIKey{Name: "new", Consumer: "acme", SHA256: hashOf("new")})
	step("one key added", cfg, 1)

	cfg = next(cfg)
	old := cfg.APIKeys.Lookup("k000001")
	rotated := *old
	rotated.SHA256 = hashOf("rotated")
	if shardIndex(rotated.SHA256) == shardIndex(old.SHA256) {
		t.Fatal("pick another rotated hash")
	}
	cfg.APIKeys.Set("k000001", &rotated)
	step("a key moved to another shard", cfg, 2)

	cfg = next(cfg)
	scoped := *cfg.APIKeys.Lookup("k000002")
	scoped.Scopes = []string{"echo:read"}
	cfg.APIKeys.Set("k000002", &scoped)
	step("a key's scopes changed", cfg, 1)

	cfg = next(cfg)
	exp := *cfg.APIKeys.Lookup("k000003")
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	exp.ExpiresAt = &at
	cfg.APIKeys.Set("k000003", &exp)
	step("a key's expiry changed", cfg, 1)

	cfg = next(cfg)
	cfg.APIKeys.Delete("k000004")
	step("a key deleted", cfg, 1)

	cfg = next(cfg)
	same := *cfg.APIKeys.Lookup("k000005")
	cfg.APIKeys.Set("k000005", &same)
	step("a key rewritten unchanged", cfg, 0)

	cfg = next(cfg)
	cfg.Consumers.Set("globex", &spec.Consumer{Name: "globex", Tenant: "globex", Tier: "gold"})
	step("a consumer's tier changed", cfg, -1)

	cfg = next(cfg)
	for id, k := range cfg.APIKeys.All() {
		if k.Consumer == "globex" {
			cfg.APIKeys.Delete(id)
		}
	}
	cfg.Consumers.Delete("globex")
	step("a consumer and its keys deleted", cfg, -1)

	cfg = next(cfg)
	cfg.Consumers.Set("initech", &spec.Consumer{Name: "initech", Tenant: "initech"})
	step("a consumer without keys added", cfg, 0)

	step("a config loaded afresh", cloneDeep(cfg), 0)
	step("every key deleted", func() *spec.Config { c := next(cfg); c.APIKeys = spec.NewTable[*spec.APIKey](); return c }(), -1)
}

// cloneDeep copies every key and consumer, as a config read from the
// database again (no pointer shared with the last compile) would.
func cloneDeep(cfg *spec.Config) *spec.Config {
	c := next(cfg)
	for id, k := range c.APIKeys.All() {
		cp := *k
		c.APIKeys.Set(id, &cp)
	}
	for name, cons := range c.Consumers.All() {
		cp := *cons
		c.Consumers.Set(name, &cp)
	}
	return c
}

// Compiler.Compile keeps the state of its last successful compile.
func TestCompilerCompile(t *testing.T) {
	cfg, opts := withKeys(t, 500)
	c := NewCompiler(opts)
	for range 3 {
		got, err := c.Compile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		want, err := Compile(cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		if !Equal(got, want) {
			t.Fatal("Compiler.Compile differs from Compile")
		}
		cfg = next(cfg)
		id := fmt.Sprintf("x%d", cfg.Version)
		cfg.APIKeys.Set(id, &spec.APIKey{Name: id, Consumer: "acme", SHA256: hashOf(id)})
	}
}
