package compile

import (
	"encoding/hex"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-io/portico/controlplane/spec"
	authv1 "github.com/portico-io/portico/proto/portico/auth/v1"
)

// numShards is how many ApiKeyShards keys spread over: one per value of
// the first byte of their hash.
const numShards = 256

// ShardName is the ApiKeyShard holding the key whose SHA-256 is sha256Hex.
func ShardName(sha256Hex string) string {
	return APIKeyShardPrefix + strings.ToLower(sha256Hex[:2])
}

// shardIndex is the shard of a (validated, lowercase hex) key hash.
func shardIndex(sha256Hex string) int {
	return int(unhex(sha256Hex[0]))<<4 | int(unhex(sha256Hex[1]))
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10
	}
	return 0
}

// Compiler compiles successive config versions like Compile, and reuses
// every ApiKeyShard whose inputs — its keys, and the tenant and tier of
// their consumers — did not change since the version it compiled before:
// the same message, with the same hash (its delta xDS version), neither
// rebuilt, validated nor marshalled again. So after a million keys, one
// key change rebuilds one shard of about 1/256 of them. Which shards
// changed is found by comparing the two versions' maps (values shared
// between versions, as the store's copy-on-write configs share them, are
// compared by pointer), so what remains proportional to the key count is
// one pass over the keys.
//
// A Compiler is safe for concurrent use; the output of every call equals
// Compile's for the same config.
type Compiler struct {
	opts Options
	mu   sync.Mutex
	last *shardState // of the last successful compile
}

// NewCompiler returns a Compiler for opts.
func NewCompiler(opts Options) *Compiler { return &Compiler{opts: opts} }

// Compile compiles cfg; see Compile.
func (c *Compiler) Compile(cfg *spec.Config) (*Snapshot, error) {
	c.mu.Lock()
	sc := &shardCache{prev: c.last}
	c.mu.Unlock()
	snap, err := compileConfig(cfg, c.opts, sc)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.last = sc.next
	c.mu.Unlock()
	return snap, nil
}

// shardCache carries one compile's previous shard state in, and its new
// state out.
type shardCache struct {
	prev, next *shardState
	// rebuilt counts the shards the compile built (tests, benchmarks).
	rebuilt int
}

// shardState is what a compile's shards were built from. The maps are a
// config's own (immutable by the store's contract), kept to compare with.
type shardState struct {
	keys      map[string]*spec.APIKey
	consumers map[string]*spec.Consumer
	shards    [numShards]*builtShard // nil: no keys
}

type builtShard struct {
	res  *authv1.ApiKeyShard
	hash string
}

// apiKeyShardsReusing compiles the ApiKeyShards, reusing sc.prev's where
// their inputs are unchanged, and records the new state in sc.next. It
// returns the shards (only non-empty ones) and the hash of each.
func (c *compiler) apiKeyShardsReusing(sc *shardCache) ([]Resource, map[Resource]string, error) {
	var (
		prev  *shardState
		dirty [numShards]bool
	)
	if sc != nil {
		prev = sc.prev
	}
	if prev == nil {
		for i := range dirty {
			dirty[i] = true
		}
	} else {
		dirty = c.changedShards(prev)
	}
	next := &shardState{keys: c.cfg.APIKeys, consumers: c.cfg.Consumers}
	if prev != nil {
		next.shards = prev.shards
	}
	anyDirty := false
	for i, d := range dirty {
		if d {
			next.shards[i], anyDirty = nil, true
		}
	}
	rebuilt := 0
	if anyDirty {
		built := map[int]*authv1.ApiKeyShard{}
		for _, k := range c.cfg.APIKeys {
			i := shardIndex(k.SHA256)
			if !dirty[i] {
				continue
			}
			s := built[i]
			if s == nil {
				s = &authv1.ApiKeyShard{Name: ShardName(k.SHA256)}
				built[i] = s
			}
			if key := c.apiKeyMessage(k); key != nil {
				s.Keys = append(s.Keys, key)
			}
		}
		for i, s := range built {
			// Map order above; sorted by id here, which is cheaper than
			// sorting every key of the config.
			slices.SortFunc(s.Keys, func(a, b *authv1.ApiKey) int { return strings.Compare(a.Id, b.Id) })
			h, err := checkAndHash(ApiKeyShardType, s.Name, s)
			if err != nil {
				return nil, nil, err
			}
			next.shards[i] = &builtShard{res: s, hash: h}
			rebuilt++
		}
	}
	out := []Resource{}
	known := map[Resource]string{}
	for _, b := range next.shards {
		if b != nil {
			out = append(out, b.res)
			known[b.res] = b.hash
		}
	}
	if sc != nil {
		sc.next, sc.rebuilt = next, rebuilt
	}
	return out, known, nil
}

// changedShards marks the shards whose inputs differ between prev and the
// config being compiled: a key added, removed or changed (both its old and
// new shard), or a key whose consumer's tenant or tier changed.
func (c *compiler) changedShards(prev *shardState) [numShards]bool {
	var dirty [numShards]bool
	consumersChanged := map[string]bool{}
	foundConsumers := 0
	for name, c1 := range c.cfg.Consumers {
		c0, ok := prev.consumers[name]
		if ok {
			foundConsumers++
		}
		if c0 != c1 && (c0 == nil || c0.Tenant != c1.Tenant || c0.Tier != c1.Tier) {
			consumersChanged[name] = true
		}
	}
	if foundConsumers < len(prev.consumers) {
		for name := range prev.consumers {
			if _, ok := c.cfg.Consumers[name]; !ok {
				consumersChanged[name] = true
			}
		}
	}
	found := 0
	for id, k1 := range c.cfg.APIKeys {
		k0, ok := prev.keys[id]
		switch {
		case !ok:
			dirty[shardIndex(k1.SHA256)] = true
		case k0 != k1 && !sameKey(k0, k1):
			dirty[shardIndex(k0.SHA256)] = true
			dirty[shardIndex(k1.SHA256)] = true
		}
		if ok {
			found++
		}
		if len(consumersChanged) > 0 && consumersChanged[k1.Consumer] {
			dirty[shardIndex(k1.SHA256)] = true
		}
	}
	if found < len(prev.keys) {
		for id, k0 := range prev.keys {
			if _, ok := c.cfg.APIKeys[id]; !ok {
				dirty[shardIndex(k0.SHA256)] = true
			}
		}
	}
	return dirty
}

// sameKey reports whether two revisions of a key compile alike.
func sameKey(a, b *spec.APIKey) bool {
	if a.Name != b.Name || a.SHA256 != b.SHA256 || a.Consumer != b.Consumer || !slices.Equal(a.Scopes, b.Scopes) {
		return false
	}
	if (a.ExpiresAt == nil) != (b.ExpiresAt == nil) {
		return false
	}
	return a.ExpiresAt == nil || a.ExpiresAt.Equal(*b.ExpiresAt)
}

// apiKeyMessage is one key as extauthz receives it. Tenant and tier come
// from the consumer so extauthz needs no second lookup.
func (c *compiler) apiKeyMessage(k *spec.APIKey) *authv1.ApiKey {
	sum, err := hex.DecodeString(k.SHA256)
	if err != nil || len(sum) != 32 {
		return nil // unreachable after spec validation
	}
	key := &authv1.ApiKey{
		Id:       k.Name,
		Sha256:   sum,
		Consumer: k.Consumer,
		Scopes:   slices.Clone(k.Scopes),
	}
	if cons := c.cfg.Consumers[k.Consumer]; cons != nil {
		key.Tenant, key.Tier = cons.Tenant, cons.Tier
	}
	if k.ExpiresAt != nil {
		key.ExpiresAt = timestamppb.New(*k.ExpiresAt)
	}
	return key
}
