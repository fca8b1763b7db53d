package policy

import "google.golang.org/protobuf/types/known/anypb"

// ShardOf returns p's index of the shard whose keys' hashes start with b
// (nil when p has none), for tests to compare by pointer.
func ShardOf(p *Policy, b byte) *keyShard { return p.shards[b] }

// Src is the resource s was decoded from.
func (s *keyShard) Src() *anypb.Any { return s.src }
