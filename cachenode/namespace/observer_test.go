package namespace

import (
	"testing"

	"github.com/portico-io/portico/cachenode/keyspace"
)

type recorder struct{ got []string }

func (r *recorder) Changed(db *keyspace.DB, key []byte, e *keyspace.Entry) {
	r.got = append(r.got, db.Name()+" "+string(key))
}
func (r *recorder) Flushed(db *keyspace.DB) { r.got = append(r.got, db.Name()+" flushed") }

// TestRegistryObserver: every namespace DB, including ones a reload adds,
// reports to the registry's observer under its own name, and removing a
// namespace reports its flush.
func TestRegistryObserver(t *testing.T) {
	rec := &recorder{}
	r := NewRegistry(RegistryConfig{Shards: 4, Observer: rec})
	if err := r.Apply([]Settings{{Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{Default, "a"} {
		n, _ := r.Get(name)
		var tx keyspace.Txn
		k := [][]byte{[]byte("k")}
		n.DB.Begin(&tx, k)
		tx.SetString(k[0], []byte("v"), 0)
		tx.End()
	}
	if err := r.Apply(nil); err != nil {
		t.Fatal(err)
	}
	want := []string{"default k", "a k", "a flushed"}
	if len(rec.got) != len(want) {
		t.Fatalf("observed %q, want %q", rec.got, want)
	}
	for i := range want {
		if rec.got[i] != want[i] {
			t.Fatalf("observed %q, want %q", rec.got, want)
		}
	}
}
