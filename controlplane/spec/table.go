package spec

import (
	"encoding/json"
	"hash/maphash"
	"iter"
	"maps"
	"sort"
	"sync/atomic"
)

// tableShards is how many maps a Table splits its entries over. A changed
// copy of a table of n entries clones n/tableShards of them per shard it
// touches: about a thousand at a million API keys.
const tableShards = 1024

// tableSeed spreads names over shards. Per process: shard placement is
// never persisted or compared across processes.
var tableSeed = maphash.MakeSeed()

// Table is a map from resource name to resource for the kinds that number
// in the millions (API keys, consumers, revocations), built so that a
// config version differing from the last by one entry shares all but one
// of its shards with it: Clone copies tableShards pointers, and the first
// write to a shard after Clone copies that shard alone.
//
// A Table is written by one goroutine while it is built; once it has been
// cloned it is frozen and writing to it panics, since its shards are now
// shared with the clone. Reads are safe from any number of goroutines once
// writes are over. The zero value and nil are empty and read-only; use
// NewTable to write.
type Table[V comparable] struct {
	shards [tableShards]*tableShard[V]
	n      int
	frozen atomic.Bool
}

// tableShard is one shard; owner is the table allowed to write it in
// place (a clone writes to a copy of the shard instead).
type tableShard[V comparable] struct {
	m     map[string]V
	owner *Table[V]
}

// NewTable returns an empty, writable table.
func NewTable[V comparable]() *Table[V] { return &Table[V]{} }

// TableOf returns a table holding m's entries (tests and small configs).
func TableOf[V comparable](m map[string]V) *Table[V] {
	t := NewTable[V]()
	for k, v := range m {
		t.Set(k, v)
	}
	return t
}

func shardOf(name string) int {
	return int(maphash.String(tableSeed, name) % tableShards)
}

// Len is the number of entries.
func (t *Table[V]) Len() int {
	if t == nil {
		return 0
	}
	return t.n
}

// Get returns the entry for name and whether there is one.
func (t *Table[V]) Get(name string) (V, bool) {
	var zero V
	if t == nil {
		return zero, false
	}
	s := t.shards[shardOf(name)]
	if s == nil {
		return zero, false
	}
	v, ok := s.m[name]
	return v, ok
}

// Lookup returns the entry for name, or the zero value.
func (t *Table[V]) Lookup(name string) V {
	v, _ := t.Get(name)
	return v
}

// Has reports whether name has an entry.
func (t *Table[V]) Has(name string) bool {
	_, ok := t.Get(name)
	return ok
}

// writable returns shard i, copied first unless t owns it.
func (t *Table[V]) writable(i int) *tableShard[V] {
	if t.frozen.Load() {
		panic("spec: write to a Table after Clone")
	}
	s := t.shards[i]
	if s != nil && s.owner == t {
		return s
	}
	ns := &tableShard[V]{owner: t}
	if s != nil {
		ns.m = maps.Clone(s.m)
	} else {
		ns.m = map[string]V{}
	}
	t.shards[i] = ns
	return ns
}

// Set puts v under name.
func (t *Table[V]) Set(name string, v V) {
	s := t.writable(shardOf(name))
	if _, ok := s.m[name]; !ok {
		t.n++
	}
	s.m[name] = v
}

// Delete removes name's entry, if any.
func (t *Table[V]) Delete(name string) {
	i := shardOf(name)
	if s := t.shards[i]; s == nil {
		return
	} else if _, ok := s.m[name]; !ok {
		return
	}
	s := t.writable(i)
	delete(s.m, name)
	t.n--
	if len(s.m) == 0 {
		t.shards[i] = nil
	}
}

// Clone returns a writable copy of t sharing every shard with it, and
// freezes t. Cloning nil returns an empty table.
func (t *Table[V]) Clone() *Table[V] {
	if t == nil {
		return NewTable[V]()
	}
	t.frozen.Store(true)
	c := &Table[V]{shards: t.shards, n: t.n}
	return c
}

// All yields every entry, in no particular order.
func (t *Table[V]) All() iter.Seq2[string, V] {
	return func(yield func(string, V) bool) {
		if t == nil {
			return
		}
		for _, s := range t.shards {
			if s == nil {
				continue
			}
			for k, v := range s.m {
				if !yield(k, v) {
					return
				}
			}
		}
	}
}

// Names returns every name in ascending order.
func (t *Table[V]) Names() []string {
	out := make([]string, 0, t.Len())
	for k := range t.All() {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Map returns the entries as a new map (tests, small tables).
func (t *Table[V]) Map() map[string]V {
	out := make(map[string]V, t.Len())
	for k, v := range t.All() {
		out[k] = v
	}
	return out
}

// Changes calls fn for every name whose entry differs between prev and t
// (compared with ==: a pointer to an unchanged resource is equal), with
// the old and new entries and whether each exists. Shards the two tables
// share are skipped unread, so comparing a config version with the one it
// was cloned from costs the shards it changed, not its size. Stops early
// if fn returns false.
func (t *Table[V]) Changes(prev *Table[V], fn func(name string, old, cur V, hadOld, hasCur bool) bool) {
	var empty [tableShards]*tableShard[V]
	a, b := &empty, &empty
	if prev != nil {
		a = &prev.shards
	}
	if t != nil {
		b = &t.shards
	}
	var zero V
	for i := range tableShards {
		s0, s1 := a[i], b[i]
		if s0 == s1 {
			continue
		}
		var m0, m1 map[string]V
		if s0 != nil {
			m0 = s0.m
		}
		if s1 != nil {
			m1 = s1.m
		}
		for k, v1 := range m1 {
			v0, ok := m0[k]
			if !ok || v0 != v1 {
				if !fn(k, v0, v1, ok, true) {
					return
				}
			}
		}
		for k, v0 := range m0 {
			if _, ok := m1[k]; !ok {
				if !fn(k, v0, zero, true, false) {
					return
				}
			}
		}
	}
}

// MarshalJSON encodes the table as a JSON object (keys sorted), like the
// map it stands for.
func (t *Table[V]) MarshalJSON() ([]byte, error) { return json.Marshal(t.Map()) }
