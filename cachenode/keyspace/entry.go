package keyspace

import "unsafe"

// Entry layout. A new entry is one allocation, a block: the Entry, then its
// key, then (for a string whose key and value fit maxBlock bytes) room for
// the value. The map's key string points at the block's key bytes, and
// Str at its value room. A GET then reads one object: the key comparison
// brings in the entry's first cache line and the value follows it, where a
// separate key and value were two more dependent cache misses on a table
// larger than the CPU caches (BenchmarkTxnGetMany: -26 % per lookup on
// 200k keys). Memory does not grow: the block's size class replaces the
// entry's, the key's and the value's.
//
// Invariants:
//   - a block's key bytes are written once, before the entry is in the map,
//     and never change;
//   - while Str points into the block (inline), its capacity is all of the
//     room after the key, so cap(Str) accounts for the whole block;
//   - a value that outgrows the room, or an object replacing an inline
//     string, moves the key to a new entry (rekey), so no block holds
//     unaccounted room;
//   - Rename gives the entry a new block under the new key (copy).
//
// Keys over maxInlineKey bytes get a plain Entry and their own allocation.

const (
	maxInlineKey = 64
	// maxBlock is the most key and value bytes kept in one block: the
	// Entry plus this is Go's 512-byte size class.
	maxBlock = 464
)

type block[A any] struct {
	e Entry
	b A
}

func allocBlock[A any]() (*Entry, []byte) {
	x := new(block[A])
	return &x.e, unsafe.Slice((*byte)(unsafe.Pointer(&x.b)), unsafe.Sizeof(x.b))
}

// blockSizes are the byte capacities after the Entry header (48 bytes)
// that fill a Go size class exactly, up to maxBlock.
var blockAllocs = [...]struct {
	n     int
	alloc func() (*Entry, []byte)
}{
	{16, allocBlock[[16]byte]}, {32, allocBlock[[32]byte]}, {48, allocBlock[[48]byte]},
	{64, allocBlock[[64]byte]}, {80, allocBlock[[80]byte]}, {96, allocBlock[[96]byte]},
	{112, allocBlock[[112]byte]}, {128, allocBlock[[128]byte]}, {144, allocBlock[[144]byte]},
	{160, allocBlock[[160]byte]}, {176, allocBlock[[176]byte]}, {192, allocBlock[[192]byte]},
	{208, allocBlock[[208]byte]}, {240, allocBlock[[240]byte]}, {272, allocBlock[[272]byte]},
	{304, allocBlock[[304]byte]}, {336, allocBlock[[336]byte]}, {368, allocBlock[[368]byte]},
	{400, allocBlock[[400]byte]}, {432, allocBlock[[432]byte]}, {464, allocBlock[[464]byte]},
}

// blockFor[(n+15)/16] is the index in blockAllocs of the smallest block
// holding n bytes.
var blockFor = func() (t [maxBlock/16 + 1]uint8) {
	j := 0
	for i := range t {
		for blockAllocs[j].n < i*16 {
			j++
		}
		t[i] = uint8(j)
	}
	return t
}()

// newEntry allocates an entry for key holding a copy of val when str is
// true (else an empty entry, for an object), and returns it with the string
// to use as its map key.
func newEntry(key, val []byte, str bool) (*Entry, string) {
	klen := len(key)
	if klen > maxInlineKey {
		e := &Entry{}
		if str {
			e.Str = append(make([]byte, 0, len(val)), val...)
		}
		return e, string(key)
	}
	n := klen
	if str && klen+len(val) <= maxBlock {
		n += len(val)
	}
	if n == 0 {
		n = 1 // an empty key and an empty value still get their room
	}
	e, b := blockAllocs[blockFor[(n+15)/16]].alloc()
	copy(b, key)
	k := unsafe.String(unsafe.SliceData(b), klen)
	switch room := b[klen:]; {
	case !str:
	case len(val) <= len(room):
		e.Str = room[:copy(room, val):len(room)]
	default:
		e.Str = append(make([]byte, 0, len(val)), val...)
	}
	return e, k
}

// inline reports whether e's string value lives in e's own block, key
// being the key e is stored under. It compares addresses as integers (no
// pointer is made from them); a separate value buffer that happens to sit
// right after a block with no room left looks inline, which only makes a
// later growth move the entry when it need not.
func inline(e *Entry, key []byte) bool { return inlineAt(e, len(key)) }

func inlineAt(e *Entry, klen int) bool {
	return e.Str != nil && uintptr(unsafe.Pointer(e))+unsafe.Sizeof(Entry{})+uintptr(klen) == uintptr(unsafe.Pointer(unsafe.SliceData(e.Str)))
}

// storedKey returns the key string of e's block (the bytes the map's key
// shares), key being the key e is stored under, so an index of keys (the
// TTL set) need not copy it; a copy for a key too long for a block.
func storedKey(e *Entry, key []byte) string {
	if len(key) > maxInlineKey {
		return string(key)
	}
	// Every entry of a key this short is a block with its key right after
	// the Entry (newEntry), and at least 16 bytes there.
	return unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(e), unsafe.Sizeof(Entry{}))), len(key))
}
