package dump

import (
	"encoding/binary"
	"fmt"

	"github.com/portico-io/portico/cachenode/keyspace"
	"github.com/portico-io/portico/cachenode/namespace"
)

// Op is what a record does.
type Op uint8

// Ops.
const (
	// OpSet replaces the key with the record's value.
	OpSet Op = iota + 1
	// OpDel deletes the key.
	OpDel
	// OpFlush deletes every key of the namespace.
	OpFlush
)

func (o Op) String() string {
	switch o {
	case OpSet:
		return "set"
	case OpDel:
		return "del"
	case OpFlush:
		return "flush"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// AppendRecord appends a framed record to dst. e is the value for OpSet
// (the caller holds its lock) and ignored otherwise, as key is for OpFlush.
func AppendRecord(dst []byte, op Op, ns string, key []byte, e *keyspace.Entry) []byte {
	// Reserve the largest uvarint a body length can need, encode the body,
	// then move it down over the unused length bytes: one pass, no second
	// buffer.
	const lenRoom = binary.MaxVarintLen32
	start := len(dst)
	dst = append(dst, make([]byte, lenRoom)...)
	body := len(dst)
	dst = append(dst, byte(op))
	dst = appendString(dst, ns)
	if op != OpFlush {
		dst = appendBytes(dst, key)
	}
	if op == OpSet {
		dst = AppendValue(dst, e)
	}
	var hdr [binary.MaxVarintLen64]byte
	h := binary.PutUvarint(hdr[:], uint64(len(dst)-body))
	copy(dst[start:], hdr[:h])
	n := copy(dst[start+h:], dst[body:])
	return dst[:start+h+n]
}

// Record is a decoded record. Key and Value alias the decoded buffer.
type Record struct {
	Op    Op
	NS    string
	Key   []byte
	Value Value
}

// ReadRecord decodes the record at the start of b and returns the bytes it
// took. A b holding only the beginning of a record gives ErrShort (read
// more); anything malformed gives ErrCorrupt, after which the stream cannot
// be resynchronized.
func ReadRecord(b []byte) (r Record, n int, err error) {
	size, k := binary.Uvarint(b)
	switch {
	case k == 0:
		return r, 0, ErrShort
	case k < 0 || size > MaxRecord:
		return r, 0, fmt.Errorf("%w: record length", ErrCorrupt)
	case uint64(len(b)-k) < size:
		return r, 0, ErrShort
	}
	n = k + int(size)
	d := decoder{b: b[k:n]}
	if len(d.b) == 0 {
		return Record{}, 0, fmt.Errorf("%w: empty record", ErrCorrupt)
	}
	r.Op = Op(d.b[0])
	d.b = d.b[1:]
	r.NS = string(d.bytes())
	switch r.Op {
	case OpSet:
		r.Key = d.bytes()
		if d.err == nil {
			r.Value, d.err = DecodeValue(d.b)
			d.b = nil
		}
	case OpDel:
		r.Key = d.bytes()
	case OpFlush:
	default:
		return Record{}, 0, fmt.Errorf("%w: unknown op %d", ErrCorrupt, r.Op)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes in record")
	}
	if d.err != nil {
		return Record{}, 0, d.err
	}
	return r, n, nil
}

// Apply applies r to its namespace's DB in reg, at nowMs: an OpSet whose
// deadline has passed deletes the key instead, so an applied stream never
// resurrects a key its source already expired.
func Apply(reg *namespace.Registry, r *Record, nowMs int64) error {
	ns, err := reg.Get(r.NS)
	if err != nil {
		return fmt.Errorf("%w %q", ErrNamespace, r.NS)
	}
	if r.Op == OpFlush {
		ns.DB.Flush()
		return nil
	}
	keys := [1][]byte{r.Key}
	var tx keyspace.Txn
	ns.DB.BeginAt(&tx, keys[:], nowMs)
	defer tx.End()
	switch r.Op {
	case OpSet:
		if r.Value.ExpireAt != 0 && r.Value.ExpireAt <= nowMs {
			tx.Delete(r.Key)
			return nil
		}
		r.Value.Store(&tx, r.Key)
	case OpDel:
		tx.Delete(r.Key)
	default:
		return fmt.Errorf("%w: unknown op %d", ErrCorrupt, r.Op)
	}
	return nil
}
