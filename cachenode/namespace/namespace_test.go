package namespace

import (
	"errors"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode/evict"
)

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1024": 1024, "1k": 1000, "1kb": 1024, "256mb": 256 << 20, "2GB": 2 << 30, "3m": 3e6, "10b": 10} {
		got, err := ParseBytes(in)
		if err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "1.5mb", "mb", "1tb", "99999999999gb"} {
		if _, err := ParseBytes(bad); !errors.Is(err, ErrBadByteValue) {
			t.Errorf("ParseBytes(%q) = %v", bad, err)
		}
	}
}

func TestParseFile(t *testing.T) {
	set, err := Parse([]byte(`
namespaces:
  orders:
    secret: s3cret
    maxmemory: 256mb
    policy: allkeys-lfu
    defaultTTL: 10m
    maxValueSize: 512kb
    opsPerSecond: 5000
    bytesPerSecond: 10mb
    prefixDepth: 2
  open: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Settings{}
	for _, s := range set {
		byName[s.Name] = s
	}
	o := byName["orders"]
	if !o.CheckSecret([]byte("s3cret")) || o.CheckSecret([]byte("nope")) || o.MaxMemory != 256<<20 || o.Policy != evict.AllKeysLFU ||
		o.DefaultTTL != 10*time.Minute || o.MaxValueSize != 512<<10 || o.OpsPerSecond != 5000 || o.BytesPerSecond != 10<<20 || o.PrefixDepth != 2 {
		t.Fatalf("orders = %+v", o)
	}
	if d := byName["open"]; d.HasSecret || d.MaxValueSize != DefaultMaxValueSize || d.PrefixSeparator != ":" {
		t.Fatalf("defaults = %+v", d)
	}
	for name, bad := range map[string]string{
		"empty":        ``,
		"unknownField": "namespaces:\n  a: {maxmem: 1}\n",
		"policy":       "namespaces:\n  a: {policy: random}\n",
		"bytes":        "namespaces:\n  a: {maxmemory: lots}\n",
		"ttl":          "namespaces:\n  a: {defaultTTL: soon}\n",
		"name":         "namespaces:\n  'a b': {}\n",
		"bothSecrets":  "namespaces:\n  a: {secret: x, secretSHA256: 00}\n",
		"negative":     "namespaces:\n  a: {opsPerSecond: -1}\n",
	} {
		if _, err := Parse([]byte(bad)); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Parse = %v, want ErrConfig", name, err)
		}
	}
}

func TestRegistryApplyKeepsDataAndRemoves(t *testing.T) {
	r := NewRegistry(RegistryConfig{Shards: 4})
	if err := r.Apply([]Settings{{Name: "a", MaxMemory: 100}}); err != nil {
		t.Fatal(err)
	}
	a, _ := r.Get("a")
	if _, err := r.Get(Default); err != nil {
		t.Fatal("default namespace missing after Apply without it")
	}
	if err := r.Apply([]Settings{{Name: "a", MaxMemory: 200, Policy: evict.NoEviction}, {Name: "b"}}); err != nil {
		t.Fatal(err)
	}
	a2, _ := r.Get("a")
	if a2 != a || a.Settings().MaxMemory != 200 || a.DB.Policy() != evict.NoEviction {
		t.Fatal("Apply replaced the namespace instead of updating it in place")
	}
	b, _ := r.Get("b")
	if err := r.Apply([]Settings{{Name: "a"}, {Name: "a"}}); !errors.Is(err, ErrConfig) {
		t.Fatalf("duplicate names: %v", err)
	}
	if _, err := r.Get("b"); err != nil {
		t.Fatal("a rejected Apply changed the registry")
	}
	if err := r.Apply([]Settings{{Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	if !b.Removed() {
		t.Fatal("b not marked removed")
	}
	if _, err := r.Get("b"); !errors.Is(err, ErrUnknown) {
		t.Fatalf("Get(b) after removal = %v", err)
	}
	if _, err := r.Auth("b", nil); !errors.Is(err, ErrWrongSecret) {
		t.Fatalf("Auth(removed) = %v", err)
	}
	if _, err := r.Auth(Default, []byte("x")); !errors.Is(err, ErrNoSecret) {
		t.Fatalf("Auth(default without secret) = %v", err)
	}
}

func TestLimitsAndPrefixes(t *testing.T) {
	now := int64(1_000_000)
	r := NewRegistry(RegistryConfig{Shards: 4, Now: func() int64 { return now }})
	if err := r.Apply([]Settings{{Name: "a", OpsPerSecond: 2, BytesPerSecond: 100, PrefixDepth: 1, MaxPrefixes: 2}}); err != nil {
		t.Fatal(err)
	}
	a, _ := r.Get("a")
	if a.Admit(10, now) != nil || a.Admit(10, now) != nil {
		t.Fatal("first two ops refused")
	}
	if err := a.Admit(10, now); !errors.Is(err, ErrRateOps) {
		t.Fatalf("third op: %v", err)
	}
	now += 1000
	a.ChargeReply(500, now) // deep in bandwidth debt
	if err := a.Admit(1, now); !errors.Is(err, ErrRateBytes) {
		t.Fatalf("after a 500-byte reply: %v", err)
	}
	if a.Counters.RateLimited.Load() != 2 {
		t.Fatalf("rate limited = %d", a.Counters.RateLimited.Load())
	}
	p1, p2 := a.Prefix([]byte("user:1")), a.Prefix([]byte("user:2"))
	if p1 == nil || p1 != p2 {
		t.Fatal("same prefix, different counters")
	}
	a.Prefix([]byte("order:1"))
	a.Prefix([]byte("cart:1"))
	a.Prefix([]byte("noseparator"))
	ps := a.Prefixes()
	if len(ps) != 3 || ps["user"] == nil || ps["order"] == nil || ps[OtherPrefix] == nil {
		t.Fatalf("prefixes = %v (want user, order and %s beyond MaxPrefixes)", ps, OtherPrefix)
	}
}
