package keyspace

import (
	"bytes"
	"unsafe"
)

// The thresholds up to which a hash stays packed. The value length is
// Redis's hash-max-listpack-value; the field count is below Redis's
// hash-max-listpack-entries (HashListpackEntries), because every change
// to a pack builds a new one: past 128 fields a map makes less garbage
// per write.
const (
	HashPackEntries     = 128
	HashPackValue       = 64
	HashListpackEntries = 512
)

// hashPack is a small hash in one allocation, like Redis's listpack: its
// fields and values back to back, each after one length byte (both are at
// most HashPackValue long). A lookup reads it from the start, which at
// these sizes costs less than hashing.
//
// It exists for the collector as much as for memory: a hash as a Go map
// is a map header, a bucket group of pointers and a string and a slice
// per field, all of which every collection marks again; a packed hash is
// one pointer-free buffer. A buffer is never written once built — every
// change builds a new one — so the slices and strings HashGet and all
// hand out stay valid until nothing refers to them.
type hashPack []byte

// get returns f's value.
func (p hashPack) get(f []byte) ([]byte, bool) {
	b := p
	for len(b) > 0 {
		fl := int(b[0])
		vl := int(b[1+fl])
		if fl == len(f) && bytes.Equal(b[1:1+fl], f) {
			return b[2+fl : 2+fl+vl : 2+fl+vl], true
		}
		b = b[2+fl+vl:]
	}
	return nil, false
}

// set returns p with f set to v (f present when found), in a new buffer.
func (p hashPack) set(f, v []byte, found bool) hashPack {
	if !found {
		nb := make(hashPack, 0, len(p)+2+len(f)+len(v))
		nb = append(nb, p...)
		return append(append(append(append(nb, byte(len(f))), f...), byte(len(v))), v...)
	}
	at, old := p.find(f)
	nb := make(hashPack, 0, len(p)-old+len(v))
	nb = append(nb, p[:at+1+len(f)]...)
	nb = append(append(nb, byte(len(v))), v...)
	return append(nb, p[at+2+len(f)+old:]...)
}

// del returns p without f (present), in a new buffer; empty is nil.
func (p hashPack) del(f []byte) hashPack {
	at, old := p.find(f)
	end := at + 2 + len(f) + old
	if end-at == len(p) {
		return nil
	}
	nb := make(hashPack, 0, len(p)-(end-at))
	return append(append(nb, p[:at]...), p[end:]...)
}

// find returns where f's entry starts and its value's length; f is present.
func (p hashPack) find(f []byte) (at, vlen int) {
	for at < len(p) {
		fl := int(p[at])
		vl := int(p[at+1+fl])
		if fl == len(f) && bytes.Equal(p[at+1:at+1+fl], f) {
			return at, vl
		}
		at += 2 + fl + vl
	}
	panic("keyspace: hashPack.find: field not present")
}

// all yields every field (a string over the buffer, which is never
// written) and value, in the order they were added.
func (p hashPack) all(yield func(string, []byte) bool) {
	b := p
	for len(b) > 0 {
		fl := int(b[0])
		vl := int(b[1+fl])
		f := unsafe.String(unsafe.SliceData(b[1:]), fl)
		if !yield(f, b[2+fl:2+fl+vl:2+fl+vl]) {
			return
		}
		b = b[2+fl+vl:]
	}
}
