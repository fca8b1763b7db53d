package launcher

import (
	"testing"

	"github.com/portico-io/portico/cachenode/cluster"
)

// A cache node's restart waits only while it owns slots and a replica of
// it can take them over.
func TestPrimaryWithReplica(t *testing.T) {
	spec := cluster.Spec{Epoch: 3, Nodes: []cluster.NodeSpec{
		{ID: "a", Slots: []string{"0-8000"}},
		{ID: "b", Slots: []string{"8001-16383"}},
		{ID: "c"}, // a primary without slots
		{ID: "a1", ReplicaOf: "a"},
		{ID: "b1", ReplicaOf: "b", Failed: true},
		{ID: "old", ReplicaOf: "a", Failed: true}, // a failed-over primary
	}}
	for id, want := range map[string]bool{
		"a":       true,  // owns slots, a1 can be promoted
		"b":       false, // its only replica is failed: nobody to wait for
		"c":       false,
		"a1":      false, // a replica
		"old":     false, // demoted already: restart it as a replica
		"unknown": false,
	} {
		if got := primaryWithReplica(spec, id); got != want {
			t.Errorf("%s: %v, want %v", id, got, want)
		}
	}
}
