package testdeps

import (
	"strings"
	"testing"
)

// Three primaries that know each other and cover every slot.
func TestRedisCluster(t *testing.T) {
	procs := RedisCluster(t, 3)
	if len(procs) != 3 {
		t.Fatalf("%d nodes, want 3", len(procs))
	}
	for _, p := range procs {
		out, err := p.CLI("cluster", "info")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"cluster_slots_assigned:16384", "cluster_known_nodes:3", "cluster_size:3"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: cluster info lacks %s:\n%s", p.Addr, want, out)
			}
		}
	}
}
