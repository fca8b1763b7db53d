package command

import (
	"fmt"
	"strings"
	"testing"

	"github.com/portico-io/portico/cachenode/cluster"

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
	_, exec := session(e)
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

// TestClusterMode: with Config.Cluster the node redirects by the slot map
// and ASKING holds for exactly the next command.
func TestClusterMode(t *testing.T) {
	reg := namespace.NewRegistry(namespace.RegistryConfig{Shards: 4})
	m, err := cluster.Parse([]byte(`{"epoch": 7, "nodes": [{"id": "me", "host": "h", "port": 1, "slots": ["0-8191"]},
		{"id": "other", "host": "10.0.0.2", "port": 7000, "slots": ["8192-16383"]}]}`), "me")
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{Registry: reg, Cluster: cluster.NewState(m)})
	if err != nil {
		t.Fatal(err)
	}
	s, exec := session(e)
	// "bar" is slot 5061 (me), "foo" 12182 (other).
	for _, tc := range [][2]string{
		{"SET bar 1", "+OK\r\n"},
		{"SET foo 1", "-MOVED 12182 10.0.0.2:7000\r\n"},
		{"MGET bar foo", "-CROSSSLOT Keys in request don't hash to the same slot\r\n"},
		{"CLUSTER MYID", "$2\r\nme\r\n"},
		{"CLUSTER COUNTKEYSINSLOT 5061", ":1\r\n"},
		{"CLUSTER GETKEYSINSLOT 5061 5", "*1\r\n$3\r\nbar\r\n"},
		{"CLUSTER NODES", "$114\r\nme h:1@10001 myself,master - 0 0 7 connected 0-8191\nother 10.0.0.2:7000@17000 master - 0 0 7 connected 8192-16383\n\r\n"},
		{"INFO cluster", "$30\r\n# Cluster\r\ncluster_enabled:1\r\n\r\n"},
	} {
		if got := exec(strings.Fields(tc[0])...); got != tc[1] {
			t.Errorf("%s = %q, want %q", tc[0], got, tc[1])
		}
	}
	if exec("ASKING"); !s.Asking {
		t.Fatal("ASKING did not set the flag")
	}
	if exec("ASKING"); !s.Asking {
		t.Fatal("a second ASKING cleared the flag")
	}
	if exec("GET", "bar"); s.Asking {
		t.Fatal("the flag outlived the command after ASKING")
	}
	if exec("READONLY"); !s.ReadOnly {
		t.Fatal("READONLY")
	}
	if exec("READWRITE"); s.ReadOnly {
		t.Fatal("READWRITE")
	}
}

// session opens a session on e and returns it with a function that runs
// one command in it and returns the raw reply.
func session(e *Engine) (*Session, func(args ...string) string) {
	s := e.NewSession("t")
	var w resp.Writer
	return s, func(args ...string) string {
		w.Reset()
		a := make([][]byte, len(args))
		for i, x := range args {
			a[i] = []byte(x)
		}
		e.Exec(s, a, &w)
		return string(w.Buf)
	}
}
