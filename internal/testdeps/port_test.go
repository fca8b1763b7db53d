package testdeps

import "testing"

// TestFreePortNeverRepeats: the ports handed out in one process are
// distinct, though each is free again the moment it is picked.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 500 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		if p < portLow || p >= portHigh {
			t.Fatalf("port %d outside %d-%d", p, portLow, portHigh)
		}
		seen[p] = true
	}
}
