package policy_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/portico-io/portico/extauthz/policy"
	authv1 "github.com/portico-io/portico/proto/portico/auth/v1"
)

// testKeys returns n keys with secrets "secret-<i>", spread over the
// shards as their hashes say.
func testKeys(n int) []*authv1.ApiKey {
	keys := make([]*authv1.ApiKey, n)
	for i := range keys {
		sum := sha256.Sum256([]byte(fmt.Sprint("secret-", i)))
		keys[i] = &authv1.ApiKey{Id: fmt.Sprint("key-", i), Sha256: sum[:], Consumer: fmt.Sprint("consumer-", i%100),
			Tenant: "acme", Tier: "pro", Scopes: []string{"echo:read"}}
	}
	return keys
}

func sumOf(k *authv1.ApiKey) [sha256.Size]byte { return [sha256.Size]byte(k.GetSha256()) }

// shardMessages groups keys into ApiKeyShards, as the control plane does.
func shardMessages(keys []*authv1.ApiKey) map[byte]*authv1.ApiKeyShard {
	out := map[byte]*authv1.ApiKeyShard{}
	for _, k := range keys {
		b := k.GetSha256()[0]
		if out[b] == nil {
			out[b] = &authv1.ApiKeyShard{Name: policy.ShardName(b)}
		}
		out[b].Keys = append(out[b].Keys, k)
	}
	return out
}

// encode marshals each shard into a fresh Any, as a state-of-the-world
// response carries them: equal bytes for equal shards, never the same
// slice.
func encode(t testing.TB, shards map[byte]*authv1.ApiKeyShard) []*anypb.Any {
	t.Helper()
	out := make([]*anypb.Any, 0, len(shards))
	for _, s := range shards {
		a := &anypb.Any{}
		if err := anypb.MarshalFrom(a, s, proto.MarshalOptions{Deterministic: true}); err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

func resourcesWith(version string, shards []*anypb.Any) policy.Resources {
	return policy.Resources{
		policy.JwtProviderType:    {Version: version},
		policy.RevocationListType: {Version: version},
		policy.ApiKeyShardType:    {Version: version, Resources: shards},
	}
}

// TestBuildFromReusesUnchangedShards: after one key changes, the new
// policy decodes that key's shard again and shares every other shard with
// the previous one (by pointer); what it decides equals a full Build, and
// the previous policy is untouched.
func TestBuildFromReusesUnchangedShards(t *testing.T) {
	now := time.Now()
	keys := testKeys(3000)
	shards := shardMessages(keys)
	if len(shards) != policy.NumShards {
		t.Fatalf("%d shards, want every one of %d", len(shards), policy.NumShards)
	}
	p0, err := policy.Build(resourcesWith("1", encode(t, shards)), now)
	if err != nil {
		t.Fatal(err)
	}
	changed := keys[0]
	b := changed.GetSha256()[0]
	shards[b].Keys[0] = proto.CloneOf(changed)
	shards[b].Keys[0].Scopes = []string{"echo:read", "echo:write"}

	res1 := resourcesWith("2", encode(t, shards))
	p1, err := policy.BuildFrom(p0, res1, now)
	if err != nil {
		t.Fatal(err)
	}
	for i := range policy.NumShards {
		same := policy.ShardOf(p1, byte(i)) == policy.ShardOf(p0, byte(i))
		if same != (i != int(b)) {
			t.Errorf("shard %02x shared with the previous policy: %v, want %v", i, same, i != int(b))
		}
	}
	if k, _ := p1.Key(sumOf(changed)); k == nil || !reflect.DeepEqual(k.Scopes, []string{"echo:read", "echo:write"}) {
		t.Fatalf("changed key in the new policy: %+v", k)
	}
	if k, _ := p0.Key(sumOf(changed)); k == nil || !reflect.DeepEqual(k.Scopes, []string{"echo:read"}) {
		t.Fatalf("the previous policy changed: %+v", k)
	}

	full, err := policy.Build(res1, now)
	if err != nil {
		t.Fatal(err)
	}
	if p1.NumKeys() != len(keys) || full.NumKeys() != len(keys) {
		t.Fatalf("keys: incremental %d, full %d, want %d", p1.NumKeys(), full.NumKeys(), len(keys))
	}
	for _, k := range keys {
		a, _ := p1.Key(sumOf(k))
		f, _ := full.Key(sumOf(k))
		if a == nil || !reflect.DeepEqual(a, f) {
			t.Fatalf("key %s: incremental %+v, full %+v", k.GetId(), a, f)
		}
	}

	// Raw keeps one copy of the bytes of a reused shard: the previous one.
	held := map[*anypb.Any]bool{}
	for _, a := range p0.Raw[policy.ApiKeyShardType].Resources {
		held[a] = true
	}
	shared := 0
	for _, a := range p1.Raw[policy.ApiKeyShardType].Resources {
		if held[a] {
			shared++
		}
	}
	if n := len(p1.Raw[policy.ApiKeyShardType].Resources); n != policy.NumShards || shared != policy.NumShards-1 {
		t.Fatalf("raw: %d shards, %d of them the previous policy's; want %d and %d", n, shared, policy.NumShards, policy.NumShards-1)
	}

	// Over delta xDS the unchanged resources are the very ones held.
	delta := policy.Resources{}.With(policy.ApiKeyShardType, policy.TypeResources{Version: "3", Resources: p1.Raw[policy.ApiKeyShardType].Resources})
	p2, err := policy.BuildFrom(p1, delta, now)
	if err != nil {
		t.Fatal(err)
	}
	for i := range policy.NumShards {
		if policy.ShardOf(p2, byte(i)) != policy.ShardOf(p1, byte(i)) {
			t.Fatalf("shard %02x decoded again though its resource is the one held", i)
		}
	}
}

// TestBuildFromRejectsForeignKey: a shard holding a key whose hash belongs
// to another shard is invalid, with or without a previous policy, and the
// error names the shard and the key. The previous policy is untouched.
func TestBuildFromRejectsForeignKey(t *testing.T) {
	now := time.Now()
	keys := testKeys(600)
	shards := shardMessages(keys)
	p0, err := policy.Build(resourcesWith("1", encode(t, shards)), now)
	if err != nil {
		t.Fatal(err)
	}
	intruder := keys[0]
	var host byte
	for b := range shards {
		if b != intruder.GetSha256()[0] {
			host = b
			break
		}
	}
	moved := proto.CloneOf(intruder)
	moved.Id = "intruder"
	shards[host].Keys = append(shards[host].Keys, moved)
	res1 := resourcesWith("2", encode(t, shards))
	for name, prev := range map[string]*policy.Policy{"Build": nil, "BuildFrom": p0} {
		_, err := policy.BuildFrom(prev, res1, now)
		var ve *policy.ValidationError
		if !errors.As(err, &ve) || !errors.Is(err, policy.ErrInvalid) {
			t.Fatalf("%s: err %v, want a ValidationError wrapping ErrInvalid", name, err)
		}
		if ve.Name != policy.ShardName(host) || !strings.Contains(err.Error(), `"intruder"`) ||
			!strings.Contains(err.Error(), "belongs in shard "+policy.ShardName(intruder.GetSha256()[0])) {
			t.Fatalf("%s: error %q does not name the shard, the key and where it belongs", name, err)
		}
	}
	if k, ok := p0.Key(sumOf(intruder)); !ok || k.ID != intruder.GetId() {
		t.Fatalf("previous policy changed: %+v", k)
	}
}

// TestBuildFromDeletedKey: a key removed from its shard is gone from the
// new policy, while the other keys of that shard stay.
func TestBuildFromDeletedKey(t *testing.T) {
	now := time.Now()
	keys := testKeys(3000)
	shards := shardMessages(keys)
	p0, err := policy.Build(resourcesWith("1", encode(t, shards)), now)
	if err != nil {
		t.Fatal(err)
	}
	gone := keys[0]
	b := gone.GetSha256()[0]
	s := shards[b]
	if len(s.Keys) < 2 || s.Keys[0] != gone {
		t.Fatalf("want key-0 first in a shard of several, have %d keys", len(s.Keys))
	}
	stay := s.Keys[1]
	s.Keys = s.Keys[1:]
	p1, err := policy.BuildFrom(p0, resourcesWith("2", encode(t, shards)), now)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p1.Key(sumOf(gone)); ok {
		t.Fatal("deleted key still known")
	}
	if _, ok := p1.Key(sumOf(stay)); !ok {
		t.Fatal("a key of the same shard is lost")
	}
	if p1.NumKeys() != len(keys)-1 {
		t.Fatalf("%d keys, want %d", p1.NumKeys(), len(keys)-1)
	}

	// Removing the shard altogether (its last key deleted) removes it.
	delete(shards, b)
	p2, err := policy.BuildFrom(p1, resourcesWith("3", encode(t, shards)), now)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p2.Key(sumOf(stay)); ok || policy.ShardOf(p2, b) != nil {
		t.Fatal("keys of a removed shard still known")
	}
}

// TestBuildRejectsShardNames: a shard is named as the control plane names
// it, once.
func TestBuildRejectsShardNames(t *testing.T) {
	now := time.Now()
	p0, err := policy.Build(resourcesWith("1", encode(t, shardMessages(testKeys(10)))), now)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", "apikeys-0", "apikeys-000", "apikeys-AB", "apikeys-zz", "keys-00"} {
		a, _ := anypb.New(&authv1.ApiKeyShard{Name: name})
		if _, err := policy.Build(resourcesWith("2", []*anypb.Any{a}), now); !errors.Is(err, policy.ErrInvalid) {
			t.Errorf("name %q: err %v, want ErrInvalid", name, err)
		}
	}
	// The same shard twice, whether decoded or reused.
	twice := p0.Raw[policy.ApiKeyShardType].Resources[:1]
	copyOf := &anypb.Any{TypeUrl: twice[0].GetTypeUrl(), Value: append([]byte(nil), twice[0].GetValue()...)}
	for name, prev := range map[string]*policy.Policy{"Build": nil, "BuildFrom": p0} {
		_, err := policy.BuildFrom(prev, resourcesWith("3", []*anypb.Any{twice[0], copyOf}), now)
		if !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), "duplicate shard") {
			t.Errorf("%s: duplicate shard: %v", name, err)
		}
	}
}
