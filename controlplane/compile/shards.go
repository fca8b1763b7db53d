package compile

import (
	"encoding/hex"
	"maps"
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
// rebuilt, validated nor marshalled again. Which keys changed is read from
// the config's Tables (spec.Table.Changes), which skip the shards two
// versions share, and each ApiKeyShard's keys are indexed, so after a
// million keys one key change costs one Table shard to compare and one
// ApiKeyShard (about 1/256 of the keys) to rebuild. Only a consumer's
// tenant or tier changing costs a pass over every key.
//
// A Compiler is safe for concurrent use; the output of every call equals
// Compile's for the same config.
type Compiler struct {
	opts Options
	mu   sync.Mutex
	last *compileState // of the last successful compile
}

// NewCompiler returns a Compiler for opts.
func NewCompiler(opts Options) *Compiler { return &Compiler{opts: opts} }

// Compile compiles cfg; see Compile.
func (c *Compiler) Compile(cfg *spec.Config) (*Snapshot, error) {
	c.mu.Lock()
	sc := &reuseCache{prev: c.last}
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

// reuseCache carries the previous compile's state in, and the new one
// out.
type reuseCache struct {
	prev, next *compileState
	// rebuilt counts the shards the compile built, vhostsRebuilt the
	// virtual hosts (tests, benchmarks).
	rebuilt, vhostsRebuilt int
}

// compileState is what a compile built that the next may reuse: its
// ApiKeyShards and the virtual hosts of its route configuration. cfg is
// the config compiled (valid, and immutable by the store's contract: a
// change replaces a value, never edits it), kept to compare with; the rest
// is immutable once the state is built, and shared between states where
// unchanged.
type compileState struct {
	cfg *spec.Config
	// members are the keys of each ApiKeyShard, by id.
	members [numShards]map[string]*spec.APIKey
	shards  [numShards]*builtShard // nil: no keys
	// routes are the route configuration's virtual hosts (vhosts.go).
	routes *routeState
	// sds is what the snapshot's listeners and clusters reference by SDS.
	sds *sdsMemo
}

type builtShard struct {
	res  *authv1.ApiKeyShard
	hash string
}

// apiKeyShardsReusing compiles the ApiKeyShards, reusing sc.prev's where
// their inputs are unchanged, and records the new state in sc.next. It
// returns the shards (only non-empty ones) and the hash of each.
func (c *compiler) apiKeyShardsReusing(sc *reuseCache) ([]Resource, map[Resource]checked, error) {
	var prev *compileState
	if sc != nil {
		prev = sc.prev
	}
	next := &compileState{cfg: c.cfg}
	var dirty [numShards]bool
	if prev == nil {
		for i := range dirty {
			dirty[i] = true
		}
		for id, k := range c.cfg.APIKeys.All() {
			i := shardIndex(k.SHA256)
			if next.members[i] == nil {
				next.members[i] = map[string]*spec.APIKey{}
			}
			next.members[i][id] = k
		}
	} else {
		next.members, next.shards = prev.members, prev.shards
		dirty = c.updateMembers(prev, next)
	}
	rebuilt := 0
	for i, d := range dirty {
		if !d {
			continue
		}
		next.shards[i] = nil
		if len(next.members[i]) == 0 {
			continue
		}
		b, err := c.buildShard(next.members[i])
		if err != nil {
			return nil, nil, err
		}
		next.shards[i] = b
		rebuilt++
	}
	out := []Resource{}
	known := map[Resource]checked{}
	for _, b := range next.shards {
		if b != nil {
			out = append(out, b.res)
			known[b.res] = checked{hash: b.hash}
		}
	}
	if sc != nil {
		sc.next.members, sc.next.shards = next.members, next.shards
		sc.rebuilt = rebuilt
	}
	return out, known, nil
}

// buildShard builds, checks and hashes the ApiKeyShard of members.
func (c *compiler) buildShard(members map[string]*spec.APIKey) (*builtShard, error) {
	var s *authv1.ApiKeyShard
	for _, k := range members {
		if s == nil {
			s = &authv1.ApiKeyShard{Name: ShardName(k.SHA256), Keys: make([]*authv1.ApiKey, 0, len(members))}
		}
		if key := c.apiKeyMessage(k); key != nil {
			s.Keys = append(s.Keys, key)
		}
	}
	// Map order above; sorted by id here.
	slices.SortFunc(s.Keys, func(a, b *authv1.ApiKey) int { return strings.Compare(a.Id, b.Id) })
	h, err := checkAndHash(ApiKeyShardType, s.Name, s)
	if err != nil {
		return nil, err
	}
	return &builtShard{res: s, hash: h}, nil
}

// updateMembers brings next.members (prev's, shared) up to the config
// being compiled, copying each members map before its first change, and
// returns the shards whose inputs changed: a key added, removed or
// changed (both its old and new shard), or a key whose consumer's tenant
// or tier changed.
func (c *compiler) updateMembers(prev, next *compileState) [numShards]bool {
	var dirty, owned [numShards]bool
	member := func(i int) map[string]*spec.APIKey {
		if !owned[i] {
			owned[i] = true
			m := make(map[string]*spec.APIKey, len(next.members[i])+1)
			maps.Copy(m, next.members[i])
			next.members[i] = m
		}
		return next.members[i]
	}
	c.cfg.APIKeys.Changes(prev.cfg.APIKeys, func(id string, k0, k1 *spec.APIKey, had, has bool) bool {
		if had {
			i := shardIndex(k0.SHA256)
			delete(member(i), id)
			dirty[i] = dirty[i] || !has || !sameKey(k0, k1)
		}
		if has {
			i := shardIndex(k1.SHA256)
			member(i)[id] = k1
			dirty[i] = dirty[i] || !had || !sameKey(k0, k1)
		}
		return true
	})
	changed := map[string]bool{}
	c.cfg.Consumers.Changes(prev.cfg.Consumers, func(name string, c0, c1 *spec.Consumer, had, has bool) bool {
		// A new consumer's keys are new keys, already marked; a deleted
		// one's keys are deleted keys (the config validated).
		if had && has && (c0.Tenant != c1.Tenant || c0.Tier != c1.Tier) {
			changed[name] = true
		}
		return true
	})
	if len(changed) > 0 {
		for _, k := range c.cfg.APIKeys.All() {
			if changed[k.Consumer] {
				dirty[shardIndex(k.SHA256)] = true
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
	if cons := c.cfg.Consumers.Lookup(k.Consumer); cons != nil {
		key.Tenant, key.Tier = cons.Tenant, cons.Tier
	}
	if k.ExpiresAt != nil {
		key.ExpiresAt = timestamppb.New(*k.ExpiresAt)
	}
	return key
}
