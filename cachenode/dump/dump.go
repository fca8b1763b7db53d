// Package dump is the binary encoding of keys for DUMP/RESTORE, slot
// migration and replication: a value encoding (one key's type, value and
// deadline, checksummed like Redis's DUMP payload) and a record encoding
// (set, delete or namespace flush) that a stream or a batch is made of.
//
// This is Portico's own format, not RDB. A value is
//
//	version  byte (Version)
//	kind     byte (keyspace.Kind)
//	expireAt 8 bytes little-endian, unix ms, 0 = no deadline
//	body     string: uvarint len, bytes
//	         list/set: uvarint count, count × (uvarint len, bytes)
//	         hash: uvarint pairs, pairs × (field, value) each (uvarint len, bytes)
//	         zset: uvarint count, count × (member: uvarint len, bytes;
//	               score: 8 bytes little-endian IEEE 754), highest first
//	crc      8 bytes little-endian CRC-64/ECMA of everything before it
//
// A record is framed so a stream reader knows when it has a whole one:
//
//	uvarint  body length
//	op       byte (OpSet, OpDel, OpFlush)
//	ns       uvarint len, bytes
//	key      uvarint len, bytes (absent for OpFlush)
//	value    OpSet only: the value encoding above, to the end of the body
//
// Decoders check every length against the bytes actually present before
// allocating, so a lying length costs an error, not memory.
package dump

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/portico-io/portico/cachenode/keyspace"
)

// Version is the value encoding's version byte. A decoder rejects others.
const Version = 1

// MaxRecord bounds a record's body (a 512 MB value plus its names), so a
// corrupt length in a stream is an error rather than a wait for gigabytes.
const MaxRecord = 512<<20 + 1<<20

const (
	headerLen  = 2 + 8 // version, kind, expireAt
	trailerLen = 8     // crc
)

// AppendValue appends e's encoding to dst. e must not change meanwhile (the
// caller holds e's Txn or shard lock).
func AppendValue(dst []byte, e *keyspace.Entry) []byte {
	start := len(dst)
	dst = append(dst, Version, byte(e.Kind()))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(e.ExpireAt()))
	switch e.Kind() {
	case keyspace.KindString:
		dst = appendBytes(dst, e.Str)
	case keyspace.KindList:
		l := &e.Obj.List
		dst = binary.AppendUvarint(dst, uint64(l.Len()))
		for i := 0; i < l.Len(); i++ {
			dst = appendBytes(dst, l.At(i))
		}
	case keyspace.KindSet:
		dst = binary.AppendUvarint(dst, uint64(len(e.Obj.Set)))
		for m := range e.Obj.Set {
			dst = appendString(dst, m)
		}
	case keyspace.KindHash:
		dst = binary.AppendUvarint(dst, uint64(e.Obj.Len()))
		for f, v := range e.Obj.HashInOrder() { // a replica's or copy's replies keep the order
			dst = appendString(dst, f)
			dst = appendBytes(dst, v)
		}
	case keyspace.KindZset:
		// Highest first: Store then inserts every member at the head of
		// the skip list, without a search.
		z := e.Obj.Zset
		dst = binary.AppendUvarint(dst, uint64(z.Len()))
		for n := z.Last(); n != nil; n = n.Prev() {
			dst = appendString(dst, n.Member())
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(n.Score()))
		}
	}
	return binary.LittleEndian.AppendUint64(dst, checksum(dst[start:]))
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// Value is a decoded value. Its slices alias the decoded buffer: copy them
// (Store does) before the buffer is reused.
type Value struct {
	Kind keyspace.Kind
	Str  []byte
	// Items are a list's elements in order, or a set's or sorted set's
	// members.
	Items [][]byte
	// Scores are a sorted set's scores, Scores[i] for Items[i].
	Scores []float64
	// Fields are a hash's field, value, field, value, ...
	Fields   [][]byte
	ExpireAt int64
}

// DecodeValue decodes a value encoding. It never panics: truncation, a bad
// version, a bad checksum, an unknown kind, lengths past the input and
// trailing bytes are all ErrCorrupt; a checksum mismatch is ErrChecksum
// (which is also ErrCorrupt) and an unknown version ErrVersion.
func DecodeValue(b []byte) (Value, error) {
	var v Value
	if len(b) < headerLen+trailerLen+1 {
		return v, fmt.Errorf("%w: %d bytes is too short", ErrChecksum, len(b))
	}
	body := b[:len(b)-trailerLen]
	if checksum(body) != binary.LittleEndian.Uint64(b[len(body):]) {
		return v, ErrChecksum
	}
	if body[0] != Version {
		return v, fmt.Errorf("%w: version %d, want %d", ErrVersion, body[0], Version)
	}
	v.Kind = keyspace.Kind(body[1])
	v.ExpireAt = int64(binary.LittleEndian.Uint64(body[2:]))
	if v.ExpireAt < 0 {
		return v, fmt.Errorf("%w: negative deadline", ErrCorrupt)
	}
	d := decoder{b: body[headerLen:]}
	switch v.Kind {
	case keyspace.KindString:
		v.Str = d.bytes()
	case keyspace.KindList, keyspace.KindSet:
		v.Items = d.list(1)
		if d.err == nil && len(v.Items) == 0 {
			d.fail("empty " + v.Kind.String())
		}
	case keyspace.KindHash:
		v.Fields = d.list(2)
		if d.err == nil && len(v.Fields) == 0 {
			d.fail("empty hash")
		}
	case keyspace.KindZset:
		v.Items, v.Scores = d.zset()
		if d.err == nil && len(v.Items) == 0 {
			d.fail("empty zset")
		}
	default:
		return v, fmt.Errorf("%w: unknown kind %d", ErrCorrupt, v.Kind)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return Value{}, d.err
	}
	if v.Kind == keyspace.KindString && v.Str == nil {
		v.Str = []byte{}
	}
	return v, nil
}

// decoder reads length-prefixed fields, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorrupt, what)
	}
	d.b = nil
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	n, k := binary.Uvarint(d.b)
	if k <= 0 {
		d.fail("bad length")
		return 0
	}
	d.b = d.b[k:]
	return n
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("length past the end")
		return nil
	}
	out := d.b[:n:n]
	d.b = d.b[n:]
	return out
}

// list reads a count of groups of per slices each. The count is checked
// against the remaining bytes (every element takes at least its one-byte
// length) before anything is allocated.
func (d *decoder) list(per int) [][]byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b))/uint64(per) {
		d.fail("count past the end")
		return nil
	}
	out := make([][]byte, 0, int(n)*per)
	for i := 0; i < int(n)*per && d.err == nil; i++ {
		out = append(out, d.bytes())
	}
	return out
}

// zset reads a count of (member, score) pairs; like list it checks the
// count against the bytes left (each pair takes at least 9) first. A NaN
// score is corrupt: no command can make one.
func (d *decoder) zset() ([][]byte, []float64) {
	n := d.uvarint()
	if d.err != nil {
		return nil, nil
	}
	if n > uint64(len(d.b))/9 {
		d.fail("count past the end")
		return nil, nil
	}
	members, scores := make([][]byte, 0, n), make([]float64, 0, n)
	for range n {
		m := d.bytes()
		if d.err != nil {
			return nil, nil
		}
		if len(d.b) < 8 {
			d.fail("score past the end")
			return nil, nil
		}
		s := math.Float64frombits(binary.LittleEndian.Uint64(d.b))
		d.b = d.b[8:]
		if math.IsNaN(s) {
			d.fail("NaN score")
			return nil, nil
		}
		members, scores = append(members, m), append(scores, s)
	}
	return members, scores
}

// Store writes v at key in tx (which must hold key's shard), replacing
// whatever is there, with v's deadline. It copies v's bytes. Set members,
// hash fields and sorted-set members that repeat collapse as SADD, HSET
// and ZADD would (the last score wins).
//
// A list, set or hash without elements deletes key and returns nil, as
// Redis never keeps empty containers.
func (v *Value) Store(tx *keyspace.Txn, key []byte) *keyspace.Entry {
	if v.Kind != keyspace.KindString && len(v.Items) == 0 && len(v.Fields) < 2 {
		tx.Delete(key)
		return nil
	}
	switch v.Kind {
	case keyspace.KindString:
		return tx.SetString(key, v.Str, v.ExpireAt)
	case keyspace.KindList:
		o := keyspace.NewList()
		for _, it := range v.Items {
			o.PushBack(it)
		}
		return tx.SetObject(key, o, v.ExpireAt)
	case keyspace.KindSet:
		o := keyspace.NewSet()
		for _, it := range v.Items {
			o.SetAdd(it)
		}
		return tx.SetObject(key, o, v.ExpireAt)
	case keyspace.KindZset:
		longest := 0
		for _, it := range v.Items {
			longest = max(longest, len(it))
		}
		o := keyspace.NewZsetOf(len(v.Items), longest)
		for i, it := range v.Items {
			o.Zset.Set(it, v.Scores[i])
		}
		return tx.SetObject(key, o, v.ExpireAt)
	default:
		o := keyspace.NewHash()
		for i := 0; i+1 < len(v.Fields); i += 2 {
			o.HashSet(v.Fields[i], v.Fields[i+1])
		}
		return tx.SetObject(key, o, v.ExpireAt)
	}
}

func appendChecksum(b []byte) []byte {
	return binary.LittleEndian.AppendUint64(b, checksum(b))
}
