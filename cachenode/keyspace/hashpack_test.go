package keyspace

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// hashModel checks o against want: length, every lookup, the fields
// HashAll yields, the representation Redis would report, and the
// accounted bytes for that representation.
func hashModel(t testing.TB, o *Object, want map[string]string, packed bool) {
	t.Helper()
	if o.Len() != len(want) {
		t.Fatalf("Len %d, want %d", o.Len(), len(want))
	}
	got := map[string]string{}
	for f, v := range o.HashAll() {
		if _, dup := got[f]; dup {
			t.Fatalf("HashAll yielded %q twice", f)
		}
		got[f] = string(v)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("HashAll: %v, want %v", got, want)
	}
	for f, v := range want {
		if g, ok := o.HashGet([]byte(f)); !ok || string(g) != v {
			t.Fatalf("HashGet(%q) = %q, %v; want %q", f, g, ok, v)
		}
	}
	if _, ok := o.HashGet([]byte("\x00absent")); ok {
		t.Fatal("HashGet found an absent field")
	}
	if o.HashPacked() != packed {
		t.Fatalf("packed = %v, want %v (%d fields)", o.HashPacked(), packed, len(want))
	}
	per := int64(hashElemCost)
	if packed {
		per = hashPackCost
	}
	var bytes int64
	for f, v := range want {
		bytes += int64(len(f)+len(v)) + per
	}
	if o.bytes != bytes {
		t.Fatalf("accounted %d bytes, want %d", o.bytes, bytes)
	}
}

// TestHashPackFollowsRedisEncoding: a hash stays packed while Redis keeps
// a listpack (at most 128 fields, no field or value over 64 bytes) and
// becomes a map for good the first time either is exceeded, holding the
// same fields throughout, under random sets and deletes.
func TestHashPackFollowsRedisEncoding(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		o := NewHash()
		want := map[string]string{}
		packed := true
		long := round%4 == 0 // some rounds reach 65-byte values
		for range 400 {
			f := strings.Repeat("f", rng.IntN(3)) + string(rune('a'+rng.IntN(40))) + string(rune('a'+rng.IntN(4)))
			if rng.IntN(8) == 0 {
				f = "" // an empty field name is a field
			}
			vlen := rng.IntN(20)
			if long && rng.IntN(50) == 0 {
				vlen = 60 + rng.IntN(6)
			}
			v := strings.Repeat(string(rune('0'+rng.IntN(10))), vlen)
			if rng.IntN(3) == 0 {
				_, had := want[f]
				if o.HashDel([]byte(f)) != had {
					t.Fatalf("HashDel(%q) reported %v, had %v", f, !had, had)
				}
				delete(want, f)
			} else {
				_, had := want[f]
				if o.HashSet([]byte(f), []byte(v)) == had {
					t.Fatalf("HashSet(%q) reported new=%v, had %v", f, had, had)
				}
				want[f] = v
				if len(f) > HashPackValue || len(v) > HashPackValue || len(want) > HashPackEntries {
					packed = false
				}
			}
			hashModel(t, o, want, packed)
		}
	}
}

// TestHashPackPastEntries: the 129th field unpacks the hash, deleting
// back under 128 does not pack it again; OBJECT ENCODING's listpack
// (HashListpack) lasts to Redis's 512 fields, and a long value ends it
// too, for good.
func TestHashPackPastEntries(t *testing.T) {
	o := NewHash()
	want := map[string]string{}
	add := func(f, v string) {
		o.HashSet([]byte(f), []byte(v))
		want[f] = v
	}
	for i := range HashPackEntries {
		add(string(rune(0x100+i)), "v")
	}
	hashModel(t, o, want, true)
	add("one more", "")
	hashModel(t, o, want, false)
	o.HashDel([]byte("one more"))
	delete(want, "one more")
	hashModel(t, o, want, false)
	for i := len(want); i < HashListpackEntries; i++ {
		add(string(rune(0x1000+i)), "v")
	}
	if !o.HashListpack() {
		t.Fatalf("%d fields: Redis still has a listpack", o.Len())
	}
	add("the 513th", "v")
	o.HashDel([]byte("the 513th"))
	delete(want, "the 513th")
	if o.HashListpack() {
		t.Fatal("past 512 fields Redis converted to a hash table, and never back")
	}
	hashModel(t, o, want, false)

	small := NewHash()
	small.HashSet([]byte("f"), []byte(strings.Repeat("v", HashPackValue+1)))
	small.HashSet([]byte("f"), []byte("short"))
	if small.HashListpack() || small.HashPacked() {
		t.Fatal("a 65-byte value converts for good")
	}
}

// TestHashPackValuesStay: what HashGet and HashAll handed out stays as it
// was when the hash changes afterwards (every change builds a new buffer).
func TestHashPackValuesStay(t *testing.T) {
	o := NewHash()
	o.HashSet([]byte("a"), []byte("1111"))
	o.HashSet([]byte("b"), []byte("22"))
	v, _ := o.HashGet([]byte("a"))
	var names []string
	for f := range o.HashAll() {
		names = append(names, f)
	}
	o.HashSet([]byte("a"), []byte("9999"))
	o.HashDel([]byte("b"))
	o.HashSet([]byte("c"), []byte("3"))
	if string(v) != "1111" || strings.Join(names, ",") != "a,b" {
		t.Fatalf("handed-out value %q, names %v changed with the hash", v, names)
	}
	if len(v) != cap(v) {
		t.Fatal("a value's capacity reaches past it: an append by its reader would write into the hash")
	}
}

// FuzzHashPack drives a hash with operations decoded from the input and
// checks it against a map (hashModel).
func FuzzHashPack(f *testing.F) {
	f.Add([]byte("\x01a\x02bb\x00a\x01c\x41" + strings.Repeat("x", 65)))
	f.Fuzz(func(t *testing.T, in []byte) {
		o := NewHash()
		want := map[string]string{}
		packed := true
		for len(in) >= 2 {
			op, n := in[0], int(in[1])%70
			in = in[2:]
			n = min(n, len(in))
			key := string(in[:min(n, 3)])
			val := in[:n]
			in = in[n:]
			if op%3 == 0 {
				o.HashDel([]byte(key))
				delete(want, key)
				continue
			}
			o.HashSet([]byte(key), val)
			want[key] = string(val)
			if len(val) > HashPackValue || len(want) > HashPackEntries {
				packed = false
			}
		}
		hashModel(t, o, want, packed)
	})
}

// TestHashInOrderSurvivesARebuild: replies list a packed hash in the
// order fields were added and a map's sorted; a hash rebuilt field by
// field in that order (what a replica, COPY or a migrated slot does with
// a dump) replies in the same order as the original, whichever form each
// has.
func TestHashInOrderSurvivesARebuild(t *testing.T) {
	order := func(o *Object) []string {
		var fs []string
		for f, v := range o.HashInOrder() {
			fs = append(fs, f+"="+string(v))
		}
		return fs
	}
	rebuild := func(o *Object) *Object {
		c := NewHash()
		for f, v := range o.HashInOrder() {
			c.HashSet([]byte(f), v)
		}
		return c
	}
	small := NewHash()
	for _, f := range []string{"zeta", "alpha", "mid"} {
		small.HashSet([]byte(f), []byte(f[:1]))
	}
	if got := strings.Join(order(small), ","); got != "zeta=z,alpha=a,mid=m" {
		t.Fatalf("packed order %s, want the order added", got)
	}
	big := NewHash()
	for i := range HashPackEntries + 1 {
		big.HashSet([]byte{byte('A' + (i*7)%64), byte(i)}, []byte("v"))
	}
	for i := range 40 {
		big.HashDel([]byte{byte('A' + (i*7)%64), byte(i)})
	}
	if big.HashPacked() {
		t.Fatal("a hash that passed 128 fields stays a map")
	}
	if !slices.IsSorted(order(big)) {
		t.Fatalf("a map's order is not sorted: %v", order(big))
	}
	for _, o := range []*Object{small, big} {
		if a, b := order(o), order(rebuild(o)); !slices.Equal(a, b) {
			t.Fatalf("rebuilt hash replies %v, the original %v", b, a)
		}
	}
}
