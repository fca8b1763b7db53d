// Package record defines how versions of a key are merged, hashed and
// stored. Every replica keeps, per key, a set of sibling records
// (kvv1.Siblings); Merge is commutative, associative and idempotent, so
// replicas converge whatever order writes, hints, read repair and
// anti-entropy deliver them in.
//
// Two modes share one format. LWW records (no dot) resolve to the single
// record with the highest hybrid-logical-clock timestamp. Vector-clock
// records carry a dot (the write's identity) and the causal context the
// client read; a record is dropped once another record's context covers its
// dot, and records that do not cover each other stay side by side as
// siblings (dotted version vectors).
package record

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	kvv1 "github.com/portico-io/portico/proto/portico/kv/v1"
)

// formatV1 prefixes every stored value so the layout can change later.
const formatV1 byte = 1

// ErrCorrupt reports a stored value that cannot be decoded.
var ErrCorrupt = errors.New("record: corrupt stored value")

// Encode serialises a sibling set for storage: a format byte, then the
// protobuf encoding of kvv1.Siblings (timestamp, tombstone flag, TTL expiry,
// dot, context, value per record).
func Encode(recs []*kvv1.Record) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&kvv1.Siblings{Records: recs})
	if err != nil {
		return nil, fmt.Errorf("record: encode: %w", err)
	}
	return append([]byte{formatV1}, b...), nil
}

// Decode is the inverse of Encode.
func Decode(b []byte) ([]*kvv1.Record, error) {
	if len(b) == 0 || b[0] != formatV1 {
		return nil, ErrCorrupt
	}
	var s kvv1.Siblings
	if err := proto.Unmarshal(b[1:], &s); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return s.Records, nil
}

// Merge returns the resolved union of a and b. Neither input is modified;
// the result may share record pointers with them.
func Merge(a, b []*kvv1.Record) []*kvv1.Record {
	all := make([]*kvv1.Record, 0, len(a)+len(b))
	all = append(all, a...)
	all = append(all, b...)
	if len(all) == 0 {
		return nil
	}
	dotted := true
	for _, r := range all {
		if r.GetDot() == nil {
			dotted = false
			break
		}
	}
	if !dotted {
		// LWW (or a keyspace switched modes): the single greatest record wins.
		best := all[0]
		for _, r := range all[1:] {
			if compareLWW(r, best) > 0 {
				best = r
			}
		}
		return []*kvv1.Record{best}
	}
	// Dedupe by dot, keeping the LWW-greatest copy so the choice is
	// deterministic, then drop every record some other record's context covers.
	byDot := make(map[dotKey]*kvv1.Record, len(all))
	for _, r := range all {
		k := dotKey{r.Dot.Node, r.Dot.Counter}
		if cur, ok := byDot[k]; !ok || compareLWW(r, cur) > 0 {
			byDot[k] = r
		}
	}
	out := make([]*kvv1.Record, 0, len(byDot))
	for _, r := range byDot {
		obsolete := false
		for _, o := range byDot {
			if o != r && Covers(o.Context, r.Dot) {
				obsolete = true
				break
			}
		}
		if !obsolete {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(x, y *kvv1.Record) int {
		if c := cmpString(x.Dot.Node, y.Dot.Node); c != 0 {
			return c
		}
		return cmpUint(x.Dot.Counter, y.Dot.Counter)
	})
	return out
}

type dotKey struct {
	node string
	n    uint64
}

// Covers reports whether ctx has seen the write identified by d.
func Covers(ctx []*kvv1.VersionEntry, d *kvv1.Dot) bool {
	for _, e := range ctx {
		if e.Node == d.Node && e.Counter >= d.Counter {
			return true
		}
	}
	return false
}

// compareLWW orders records for last-write-wins: timestamp, then a tombstone
// beats a value written at the same instant, then the bytes decide, so every
// replica picks the same winner.
func compareLWW(a, b *kvv1.Record) int {
	if c := cmpUint(a.Timestamp, b.Timestamp); c != 0 {
		return c
	}
	if a.Tombstone != b.Tombstone {
		if a.Tombstone {
			return 1
		}
		return -1
	}
	if c := bytes.Compare(a.Value, b.Value); c != 0 {
		return c
	}
	return cmpUint(uint64(a.ExpiresAtUnixMs), uint64(b.ExpiresAtUnixMs))
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Digest is a hash of a resolved sibling set, equal on two replicas exactly
// when they hold the same versions. An empty set has a fixed digest.
func Digest(recs []*kvv1.Record) []byte {
	h := sha256.New()
	var buf [8]byte
	put := func(v uint64) {
		binary.BigEndian.PutUint64(buf[:], v)
		h.Write(buf[:])
	}
	putBytes := func(b []byte) {
		put(uint64(len(b)))
		h.Write(b)
	}
	put(uint64(len(recs)))
	for _, r := range recs {
		put(r.Timestamp)
		if r.Tombstone {
			put(1)
		} else {
			put(0)
		}
		put(uint64(r.ExpiresAtUnixMs))
		if r.Dot != nil {
			putBytes([]byte(r.Dot.Node))
			put(r.Dot.Counter)
		} else {
			putBytes(nil)
		}
		put(uint64(len(r.Context)))
		for _, e := range r.Context {
			putBytes([]byte(e.Node))
			put(e.Counter)
		}
		putBytes(r.Value)
	}
	return h.Sum(nil)
}

// Live reports whether r is a visible value at now: not a tombstone and not
// past its TTL.
func Live(r *kvv1.Record, now time.Time) bool {
	if r.Tombstone {
		return false
	}
	return r.ExpiresAtUnixMs == 0 || now.UnixMilli() < r.ExpiresAtUnixMs
}

// Visible returns the live records of recs at now.
func Visible(recs []*kvv1.Record, now time.Time) []*kvv1.Record {
	var out []*kvv1.Record
	for _, r := range recs {
		if Live(r, now) {
			out = append(out, r)
		}
	}
	return out
}

// Purgeable reports whether every record of the set is dead (tombstone or
// expired) since before gcBefore, so the key may be dropped without any
// replica ever resurrecting an older value: the grace period has passed.
func Purgeable(recs []*kvv1.Record, gcBefore time.Time) bool {
	if len(recs) == 0 {
		return false
	}
	cut := gcBefore.UnixMilli()
	for _, r := range recs {
		switch {
		case r.Tombstone:
			if wallMillis(r.Timestamp) >= cut {
				return false
			}
		case r.ExpiresAtUnixMs != 0:
			if r.ExpiresAtUnixMs >= cut {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func wallMillis(ts uint64) int64 { return int64(ts >> 16) }

// JoinContext returns the causal context that covers every record of recs:
// what a client must send back to supersede all of them.
func JoinContext(recs []*kvv1.Record) []*kvv1.VersionEntry {
	m := map[string]uint64{}
	add := func(node string, n uint64) {
		if n > m[node] {
			m[node] = n
		}
	}
	for _, r := range recs {
		for _, e := range r.Context {
			add(e.Node, e.Counter)
		}
		if r.Dot != nil {
			add(r.Dot.Node, r.Dot.Counter)
		}
	}
	out := make([]*kvv1.VersionEntry, 0, len(m))
	for n, c := range m {
		out = append(out, &kvv1.VersionEntry{Node: n, Counter: c})
	}
	slices.SortFunc(out, func(a, b *kvv1.VersionEntry) int { return cmpString(a.Node, b.Node) })
	return out
}

// Equal reports whether two resolved sets are identical.
func Equal(a, b []*kvv1.Record) bool { return bytes.Equal(Digest(a), Digest(b)) }

// maxContextEntries bounds a client-supplied context (one entry per node
// that ever coordinated a write to the key).
const maxContextEntries = 1024

// ErrBadContext reports an X-KV-Context that is not one this store issued.
var ErrBadContext = errors.New("record: malformed context")

// EncodeContext renders ctx as the opaque X-KV-Context token.
func EncodeContext(ctx []*kvv1.VersionEntry) string {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&kvv1.Context{Entries: ctx})
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeContext parses an X-KV-Context token; "" is the empty context.
func DecodeContext(s string) ([]*kvv1.VersionEntry, error) {
	if s == "" {
		return nil, nil
	}
	if len(s) > 64<<10 {
		return nil, fmt.Errorf("%w: too long", ErrBadContext)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadContext, err)
	}
	var c kvv1.Context
	if err := proto.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadContext, err)
	}
	if len(c.Entries) > maxContextEntries {
		return nil, fmt.Errorf("%w: too many entries", ErrBadContext)
	}
	for _, e := range c.Entries {
		if e.Node == "" || e.Counter == 0 {
			return nil, fmt.Errorf("%w: empty entry", ErrBadContext)
		}
	}
	return c.Entries, nil
}
