package keyspace

import (
	"iter"
	"maps"
	"slices"
	"strings"
)

// Kind is the type of a value, as TYPE reports it.
type Kind uint8

// Kinds.
const (
	KindString Kind = iota
	KindList
	KindSet
	KindHash
	KindZset
)

func (k Kind) String() string {
	return [...]string{"string", "list", "set", "hash", "zset"}[k]
}

// Per-element overheads used for memory accounting: an estimate of what the
// Go runtime spends beyond the payload bytes (slice/string headers, map
// slots at typical load). They make quotas track real heap use closely
// enough to be useful, not exactly.
const (
	// EntryOverhead covers the Entry struct, the map slot and key header,
	// and the rounding of separate allocations.
	EntryOverhead = 96
	// blockOverhead is EntryOverhead for a string inside its entry's
	// block (entry.go), whose key and room are counted exactly.
	blockOverhead  = 84
	listElemCost   = 24
	setElemCost    = 40
	hashElemCost   = 64
	hashPackCost   = 2 // a packed field's two length bytes (hashpack.go)
	objectOverhead = 64
)

// Object is the value of a list, set, hash or sorted-set key. Exactly one
// of its containers is in use, chosen by Kind. Bytes is the payload
// estimate the memory accounting reads; the mutators below (and Zset's)
// keep it current.
type Object struct {
	Kind Kind
	// hashBig records that Redis would have converted this hash from a
	// listpack to a hash table (more than HashListpackEntries fields, or
	// a field or value longer than HashPackValue, at some point): what
	// OBJECT ENCODING reports. Redis never converts back.
	hashBig bool
	packN   uint8 // fields in pack
	List    Deque
	Set     map[string]struct{}
	// A hash is packed (hashpack.go) while it has at most HashPackEntries
	// fields, none and no value longer than HashPackValue bytes, and a map
	// from then on. Read it through HashGet, HashAll and Len.
	pack  hashPack
	hash  map[string][]byte
	Zset  *Zset // zset.go
	bytes int64
}

// NewList, NewSet and NewHash return empty containers.
func NewList() *Object { return &Object{Kind: KindList} }
func NewSet() *Object  { return &Object{Kind: KindSet, Set: map[string]struct{}{}} }
func NewHash() *Object { return &Object{Kind: KindHash} }

// Len is the number of elements.
func (o *Object) Len() int {
	switch o.Kind {
	case KindList:
		return o.List.Len()
	case KindSet:
		return len(o.Set)
	case KindHash:
		if o.hash == nil {
			return int(o.packN)
		}
		return len(o.hash)
	case KindZset:
		return o.Zset.Len()
	}
	return 0
}

// Bytes is the accounted size of the payload.
func (o *Object) Bytes() int64 {
	if o.Zset != nil {
		return objectOverhead + o.Zset.Bytes()
	}
	return objectOverhead + o.bytes
}

// PushFront / PushBack add a copy of v to the list.
func (o *Object) PushFront(v []byte) {
	o.List.PushFront(clone(v))
	o.bytes += int64(len(v)) + listElemCost
}
func (o *Object) PushBack(v []byte) {
	o.List.PushBack(clone(v))
	o.bytes += int64(len(v)) + listElemCost
}

// PopFront / PopBack remove one list element.
func (o *Object) PopFront() []byte {
	v := o.List.PopFront()
	o.bytes -= int64(len(v)) + listElemCost
	return v
}
func (o *Object) PopBack() []byte {
	v := o.List.PopBack()
	o.bytes -= int64(len(v)) + listElemCost
	return v
}

// ListReplace replaces all list elements by items (owned by the list).
func (o *Object) ListReplace(items [][]byte) {
	o.List = Deque{}
	o.bytes = 0
	for _, it := range items {
		o.List.PushBack(it)
		o.bytes += int64(len(it)) + listElemCost
	}
}

// SetAdd adds m; it reports whether m was new.
func (o *Object) SetAdd(m []byte) bool {
	if _, ok := o.Set[string(m)]; ok {
		return false
	}
	o.Set[string(m)] = struct{}{}
	o.bytes += int64(len(m)) + setElemCost
	return true
}

// SetRemove removes m; it reports whether m was present.
func (o *Object) SetRemove(m string) bool {
	if _, ok := o.Set[m]; !ok {
		return false
	}
	delete(o.Set, m)
	o.bytes -= int64(len(m)) + setElemCost
	return true
}

// HashSet sets field f to a copy of v; it reports whether f was new.
func (o *Object) HashSet(f, v []byte) bool {
	if len(f) > HashPackValue || len(v) > HashPackValue {
		o.hashBig = true
	}
	if o.hash == nil {
		if len(f) <= HashPackValue && len(v) <= HashPackValue {
			old, found := o.pack.get(f)
			if found || o.packN < HashPackEntries {
				o.pack = o.pack.set(f, v, found)
				if found {
					o.bytes += int64(len(v) - len(old))
				} else {
					o.packN++
					o.bytes += int64(len(f)+len(v)) + hashPackCost
				}
				return !found
			}
		}
		o.unpack()
	}
	old, ok := o.hash[string(f)]
	if ok {
		o.bytes += int64(len(v) - len(old))
		o.hash[string(f)] = clone(v)
		return false
	}
	o.hash[string(f)] = clone(v)
	o.bytes += int64(len(f)+len(v)) + hashElemCost
	if len(o.hash) > HashListpackEntries {
		o.hashBig = true
	}
	return true
}

// HashDel deletes field f; it reports whether it existed.
func (o *Object) HashDel(f []byte) bool {
	if o.hash == nil {
		old, found := o.pack.get(f)
		if !found {
			return false
		}
		o.pack = o.pack.del(f)
		o.packN--
		o.bytes -= int64(len(f)+len(old)) + hashPackCost
		return true
	}
	old, ok := o.hash[string(f)]
	if !ok {
		return false
	}
	delete(o.hash, string(f))
	o.bytes -= int64(len(f)+len(old)) + hashElemCost
	return true
}

// HashGet returns field f's value. The slice is the hash's own: read it
// before the hash next changes, never write to it.
func (o *Object) HashGet(f []byte) ([]byte, bool) {
	if o.hash == nil {
		return o.pack.get(f)
	}
	v, ok := o.hash[string(f)]
	return v, ok
}

// HashAll yields every field and value, in no set order, under the same
// terms as HashGet; the hash must not change while it yields.
func (o *Object) HashAll() iter.Seq2[string, []byte] {
	return func(yield func(string, []byte) bool) {
		if o.hash == nil {
			o.pack.all(yield)
			return
		}
		for f, v := range o.hash {
			if !yield(f, v) {
				return
			}
		}
	}
}

// HashInOrder is HashAll in the order replies list a hash (HKEYS,
// HGETALL): a packed hash's fields in the order they were added, as a
// listpack's, a map's sorted by field. A dump is written in this order
// too, so that a replica or a copy, which rebuilds the hash field by
// field, replies as the original does.
func (o *Object) HashInOrder() iter.Seq2[string, []byte] {
	if o.hash == nil {
		return o.HashAll()
	}
	return func(yield func(string, []byte) bool) {
		for _, f := range slices.Sorted(maps.Keys(o.hash)) {
			if !yield(f, o.hash[f]) {
				return
			}
		}
	}
}

// HashPacked reports whether the hash is still packed (its fields keep
// the order they were added in, as a listpack's do).
func (o *Object) HashPacked() bool { return o.hash == nil }

// HashListpack reports whether Redis would still hold the hash as a
// listpack: OBJECT ENCODING's "listpack" rather than "hashtable".
func (o *Object) HashListpack() bool { return !o.hashBig }

// unpack moves a packed hash into a map, for good.
func (o *Object) unpack() {
	o.hash = make(map[string][]byte, int(o.packN)+1)
	for f, v := range o.pack.all {
		o.hash[strings.Clone(f)] = clone(v) // f is a view of the pack, which must not outlive it
	}
	o.bytes += int64(o.packN) * (hashElemCost - hashPackCost)
	o.pack, o.packN = nil, 0
}

func clone(b []byte) []byte {
	c := make([]byte, len(b))
	copy(c, b)
	return c
}

// Deque is a double-ended queue of byte slices backed by a ring buffer.
type Deque struct {
	buf        [][]byte
	head, size int
}

// Len is the number of elements.
func (d *Deque) Len() int { return d.size }

func (d *Deque) grow() {
	if d.size < len(d.buf) {
		return
	}
	n := max(8, 2*len(d.buf))
	nb := make([][]byte, n)
	for i := 0; i < d.size; i++ {
		nb[i] = d.buf[(d.head+i)%len(d.buf)]
	}
	d.buf, d.head = nb, 0
}

// PushFront adds v at the head.
func (d *Deque) PushFront(v []byte) {
	d.grow()
	d.head = (d.head - 1 + len(d.buf)) % len(d.buf)
	d.buf[d.head] = v
	d.size++
}

// PushBack adds v at the tail.
func (d *Deque) PushBack(v []byte) {
	d.grow()
	d.buf[(d.head+d.size)%len(d.buf)] = v
	d.size++
}

// PopFront removes and returns the head; the deque must not be empty.
func (d *Deque) PopFront() []byte {
	v := d.buf[d.head]
	d.buf[d.head] = nil
	d.head = (d.head + 1) % len(d.buf)
	d.size--
	return v
}

// PopBack removes and returns the tail; the deque must not be empty.
func (d *Deque) PopBack() []byte {
	i := (d.head + d.size - 1) % len(d.buf)
	v := d.buf[i]
	d.buf[i] = nil
	d.size--
	return v
}

// At returns element i (0 = head); i must be in range.
func (d *Deque) At(i int) []byte { return d.buf[(d.head+i)%len(d.buf)] }
