package command

import (
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode/evict"
	"github.com/portico-io/portico/cachenode/keyspace"
	"github.com/portico-io/portico/cachenode/namespace"
)

// TestRestoreAccessMetadata: IDLETIME sets the LRU clock and FREQ the LFU
// counter, each only under its own policy, as Redis's objectSetLRUOrLFU.
func TestRestoreAccessMetadata(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	for _, tc := range []struct {
		policy   evict.Policy
		opt, arg string
		check    func(meta uint32) bool
	}{
		{evict.AllKeysLRU, "IDLETIME", "120", func(m uint32) bool { return evict.IdleSeconds(m, now.UnixMilli()) == 120 }},
		{evict.AllKeysLFU, "FREQ", "77", func(m uint32) bool { return evict.Counter(m, now.UnixMilli()) == 77 }},
		{evict.AllKeysLFU, "IDLETIME", "120", func(m uint32) bool { return evict.Counter(m, now.UnixMilli()) == evict.LFUInitVal }},
		{evict.AllKeysLRU, "FREQ", "77", func(m uint32) bool { return evict.IdleSeconds(m, now.UnixMilli()) == 0 }},
	} {
		reg := namespace.NewRegistry(namespace.RegistryConfig{Shards: 4, Now: now.UnixMilli})
		if err := reg.Apply([]namespace.Settings{{Name: namespace.Default, Policy: tc.policy}}); err != nil {
			t.Fatal(err)
		}
		e, err := New(Config{Registry: reg, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		_, exec := session(e)
		exec("SET", "src", "v")
		out := exec("DUMP", "src")
		// Strip the bulk header: "$<n>\r\n<payload>\r\n".
		i := 0
		for out[i] != '\n' {
			i++
		}
		payload := out[i+1 : len(out)-2]
		if got := exec("RESTORE", "dst", "0", payload, tc.opt, tc.arg); got != "+OK\r\n" {
			t.Fatalf("%v %s: RESTORE = %q", tc.policy, tc.opt, got)
		}
		def, _ := reg.Get(namespace.Default)
		var tx keyspace.Txn
		def.DB.Begin(&tx, [][]byte{[]byte("dst")})
		ent := tx.Peek([]byte("dst"))
		tx.End()
		if ent == nil || !tc.check(ent.Meta()) {
			t.Errorf("%v %s %s: metadata %#x not as set", tc.policy, tc.opt, tc.arg, ent.Meta())
		}
	}
}
