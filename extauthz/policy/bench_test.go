package policy_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/portico-io/portico/extauthz/policy"
	authv1 "github.com/portico-io/portico/proto/portico/auth/v1"
)

// million is a policy of benchKeys keys, as the control plane would send
// it, and the same policy with one key changed.
type million struct {
	base            *policy.Policy
	sotw, delta     policy.Resources // the update, over both protocols
	wireBytes, keys int
}

const benchKeys = 1_000_000

func newMillion(b *testing.B) *million {
	b.Helper()
	shards := map[byte]*authv1.ApiKeyShard{}
	for i := range benchKeys {
		sum := sha256.Sum256(fmt.Appendf(nil, "secret-%d", i))
		k := &authv1.ApiKey{Id: fmt.Sprintf("k%07d", i), Sha256: sum[:], Consumer: fmt.Sprintf("c%06d", i%50000),
			Tenant: "t-0042", Tier: "pro", Scopes: []string{"echo:read"}}
		if shards[sum[0]] == nil {
			shards[sum[0]] = &authv1.ApiKeyShard{Name: policy.ShardName(sum[0])}
		}
		shards[sum[0]].Keys = append(shards[sum[0]].Keys, k)
	}
	m := &million{keys: benchKeys}
	before := encode(b, shards)
	for _, a := range before {
		m.wireBytes += len(a.GetValue())
	}
	var err error
	if m.base, err = policy.Build(resourcesWith("1", before), time.Now()); err != nil {
		b.Fatal(err)
	}
	// One key's scopes change: its shard is sent again, and over state of
	// the world every other shard too, as fresh bytes.
	s := shards[0x2a]
	s.Keys[0] = proto.CloneOf(s.Keys[0])
	s.Keys[0].Scopes = append(s.Keys[0].Scopes, "echo:write")
	m.sotw = resourcesWith("2", encode(b, shards))
	changed := encode(b, map[byte]*authv1.ApiKeyShard{0x2a: s})[0]
	var held []*anypb.Any
	for _, a := range m.base.Raw[policy.ApiKeyShardType].Resources {
		if policy.ShardOf(m.base, 0x2a).Src() != a {
			held = append(held, a)
		}
	}
	m.delta = resourcesWith("2", append(held, changed))
	return m
}

var sink *policy.Policy

// BenchmarkShardUpdate: one key of a policy of a million changes. The
// incremental builds (BuildFrom the policy in force) decode its one shard;
// the full Build decodes all 256. Allocations are per update. Friendly to
// -benchtime 1x (one update per sub-benchmark).
func BenchmarkShardUpdate(b *testing.B) {
	m := newMillion(b)
	b.Logf("%d keys, %d bytes of shards on the wire (%.0f per key)", m.keys, m.wireBytes, float64(m.wireBytes)/float64(m.keys))
	for _, tc := range []struct {
		name  string
		build func() (*policy.Policy, error)
	}{
		{"incremental_sotw", func() (*policy.Policy, error) { return policy.BuildFrom(m.base, m.sotw, time.Now()) }},
		{"incremental_delta", func() (*policy.Policy, error) { return policy.BuildFrom(m.base, m.delta, time.Now()) }},
		{"full_build", func() (*policy.Policy, error) { return policy.Build(m.sotw, time.Now()) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p, err := tc.build()
				if err != nil {
					b.Fatal(err)
				}
				sink = p
			}
			if sink.NumKeys() != m.keys {
				b.Fatalf("%d keys, want %d", sink.NumKeys(), m.keys)
			}
		})
	}
}

// BenchmarkPersist: writing the policy of a million keys, all of it (the
// first write, or Save) versus after one shard changed (a Saver that wrote
// the previous policy). Both run off the ACK path; this is the disk work
// an update costs.
func BenchmarkPersist(b *testing.B) {
	m := newMillion(b)
	next, err := policy.BuildFrom(m.base, m.sotw, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("full", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := policy.Save(b.TempDir(), next.Raw, time.Now()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("one_shard", func(b *testing.B) {
		saved := make(chan error)
		s, err := policy.NewSaver(policy.SaverConfig{Dir: b.TempDir(), Saved: func(_ *policy.Policy, err error) { saved <- err }})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		defer func() { cancel(); <-done }()
		pair := [2]*policy.Policy{m.base, next}
		s.Save(pair[0])
		if err := <-saved; err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		i := 1
		for b.Loop() {
			s.Save(pair[i%2])
			if err := <-saved; err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}
