package keyspace

import "github.com/portico-io/portico/cachenode/slots"

// Slot returns the Redis Cluster hash slot of key (see package slots).
// Shards are chosen by slot so that a slot-owning cluster node can
// enumerate (and later migrate) by slot, and so that keys sharing a hash
// tag share a shard.
func Slot(key []byte) int { return slots.Of(key) }

// NumSlots is the number of Redis Cluster hash slots.
const NumSlots = slots.N
