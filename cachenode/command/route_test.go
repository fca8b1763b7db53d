package command

import (
	"fmt"
	"testing"

	"github.com/portico-io/portico/cachenode/keyspace"
	"github.com/portico-io/portico/cachenode/namespace"
	"github.com/portico-io/portico/cachenode/resp"
)

// countingKeyspace wraps a DB the way a cluster node would, to check that
// commands reach the store only through Config.Keyspace.
type countingKeyspace struct {
	*keyspace.DB
	begins int
}

func (k *countingKeyspace) BeginAt(tx *keyspace.Txn, keys [][]byte, nowMs int64) {
	k.begins++
	k.DB.BeginAt(tx, keys, nowMs)
}

// TestRouteAndKeyspaceHooks: the hooks a slot-owning node uses. Keys of
// slots the node does not own are redirected before anything runs.
func TestRouteAndKeyspaceHooks(t *testing.T) {
	reg := namespace.NewRegistry(namespace.RegistryConfig{Shards: 4})
	def, _ := reg.Get(namespace.Default)
	wrapped := &countingKeyspace{DB: def.DB}
	owned := keyspace.Slot([]byte("mine"))
	e, err := New(Config{Registry: reg,
		Keyspace: func(*namespace.Namespace) Keyspace { return wrapped },
		Route: func(keys [][]byte) string {
			for _, k := range keys {
				if s := keyspace.Slot(k); s != owned {
					return fmt.Sprintf("MOVED %d 127.0.0.1:7001", s)
				}
			}
			return ""
		}})
	if err != nil {
		t.Fatal(err)
	}
	s := e.NewSession("t")
	var w resp.Writer
	exec := func(args ...string) string {
		w.Reset()
		a := make([][]byte, len(args))
		for i, x := range args {
			a[i] = []byte(x)
		}
		e.Exec(s, a, &w)
		return string(w.Buf)
	}
	if got := exec("SET", "mine", "v"); got != "+OK\r\n" {
		t.Fatalf("SET mine = %q", got)
	}
	other := keyspace.Slot([]byte("other"))
	if got := exec("SET", "other", "v"); got != fmt.Sprintf("-MOVED %d 127.0.0.1:7001\r\n", other) {
		t.Fatalf("SET other = %q", got)
	}
	if got := exec("MSET", "mine", "1", "other", "2"); got[0] != '-' {
		t.Fatalf("MSET across slots = %q", got)
	}
	if got := exec("DBSIZE"); got != ":1\r\n" {
		t.Fatalf("DBSIZE = %q (redirected writes must not run)", got)
	}
	if wrapped.begins != 2 {
		t.Fatalf("wrapped keyspace saw %d commands, want 2 (SET mine, DBSIZE)", wrapped.begins)
	}
}
