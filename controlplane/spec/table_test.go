package spec

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
)

// A Table behaves like a map through any sequence of writes and clones,
// clones never see their successors' writes, and Changes reports exactly
// the difference between any two of them.
func TestTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type version struct {
		tab  *Table[*int]
		want map[string]*int
	}
	vals := make([]*int, 50)
	for i := range vals {
		vals[i] = new(int)
	}
	tab, want := NewTable[*int](), map[string]*int{}
	var history []version
	for step := range 3000 {
		name := fmt.Sprintf("n%d", rng.IntN(4000))
		switch r := rng.IntN(10); {
		case r < 6:
			v := vals[rng.IntN(len(vals))]
			tab.Set(name, v)
			want[name] = v
		case r < 9:
			tab.Delete(name)
			delete(want, name)
		default:
			history = append(history, version{tab, maps.Clone(want)})
			tab = tab.Clone()
		}
		if step%97 == 0 {
			checkTable(t, tab, want)
		}
	}
	history = append(history, version{tab, want})
	for _, h := range history {
		checkTable(t, h.tab, h.want)
	}
	for i := 1; i < len(history); i++ {
		a, b := history[i-1], history[rng.IntN(len(history))]
		got := map[string]bool{}
		b.tab.Changes(a.tab, func(name string, old, cur *int, hadOld, hasCur bool) bool {
			if got[name] {
				t.Fatalf("%s reported twice", name)
			}
			got[name] = true
			o, ok0 := a.want[name]
			c, ok1 := b.want[name]
			if o != old || c != cur || ok0 != hadOld || ok1 != hasCur {
				t.Fatalf("%s: got (%p %v, %p %v), want (%p %v, %p %v)", name, old, hadOld, cur, hasCur, o, ok0, c, ok1)
			}
			return true
		})
		for name := range mapsUnion(a.want, b.want) {
			o, ok0 := a.want[name]
			c, ok1 := b.want[name]
			if (o != c || ok0 != ok1) != got[name] {
				t.Fatalf("%s: differs=%v but reported=%v", name, o != c || ok0 != ok1, got[name])
			}
		}
	}
}

func mapsUnion(a, b map[string]*int) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func checkTable(t *testing.T, tab *Table[*int], want map[string]*int) {
	t.Helper()
	if tab.Len() != len(want) {
		t.Fatalf("Len = %d, want %d", tab.Len(), len(want))
	}
	if got := tab.Map(); !maps.Equal(got, want) {
		t.Fatalf("entries differ: %d vs %d", len(got), len(want))
	}
	for k, v := range want {
		if got, ok := tab.Get(k); !ok || got != v {
			t.Fatalf("Get(%s) = %p %v, want %p", k, got, ok, v)
		}
	}
}

// A cloned table is frozen: writing to it would change its clone.
func TestTableFrozenAfterClone(t *testing.T) {
	tab := NewTable[*int]()
	tab.Set("a", new(int))
	c := tab.Clone()
	c.Set("b", new(int))
	if tab.Has("b") || tab.Len() != 1 || c.Len() != 2 {
		t.Fatal("a clone's write reached the original")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("writing a cloned table did not panic")
		}
	}()
	tab.Set("c", new(int))
}

// A one-entry change to a clone of a large table is found without reading
// the shards the two share.
func TestTableChangesSkipsSharedShards(t *testing.T) {
	tab := NewTable[*int]()
	for i := range 100_000 {
		tab.Set(fmt.Sprint(i), new(int))
	}
	c := tab.Clone()
	c.Set("new", new(int))
	c.Delete("42")
	shared := 0
	for i := range tableShards {
		if c.shards[i] == tab.shards[i] {
			shared++
		}
	}
	if want := tableShards - 2; shared < want {
		t.Fatalf("%d shards shared, want at least %d", shared, want)
	}
	var got []string
	c.Changes(tab, func(name string, _, _ *int, _, _ bool) bool { got = append(got, name); return true })
	if len(got) != 2 {
		t.Fatalf("changes = %v", got)
	}
}

// ValidateFrom gives Validate's answer for configs made from a valid base
// by any mix of key and consumer changes.
func TestValidateFromMatchesValidate(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	base := NewConfig(1)
	for i := range 20 {
		base.Consumers.Set(fmt.Sprintf("c%d", i), &Consumer{Name: fmt.Sprintf("c%d", i), Tenant: "t"})
	}
	for i := range 2000 {
		base.APIKeys.Set(fmt.Sprintf("k%04d", i), &APIKey{Name: fmt.Sprintf("k%04d", i), Consumer: fmt.Sprintf("c%d", i%20)})
	}
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	failures := 0
	for range 300 {
		next := *base
		next.Consumers, next.APIKeys = base.Consumers.Clone(), base.APIKeys.Clone()
		for range rng.IntN(4) + 1 {
			switch rng.IntN(4) {
			case 0:
				next.Consumers.Delete(fmt.Sprintf("c%d", rng.IntN(25)))
			case 1:
				n := fmt.Sprintf("c%d", rng.IntN(25))
				next.Consumers.Set(n, &Consumer{Name: n, Tenant: "t"})
			case 2:
				next.APIKeys.Delete(fmt.Sprintf("k%04d", rng.IntN(2100)))
			default:
				n := fmt.Sprintf("k%04d", rng.IntN(2100))
				next.APIKeys.Set(n, &APIKey{Name: n, Consumer: fmt.Sprintf("c%d", rng.IntN(25))})
			}
		}
		full, incr := next.Validate(), next.ValidateFrom(base)
		if fmt.Sprint(full) != fmt.Sprint(incr) {
			t.Fatalf("Validate = %v, ValidateFrom = %v", full, incr)
		}
		if full != nil {
			failures++
		} else {
			base = &next
		}
	}
	if failures == 0 || failures == 300 {
		t.Fatalf("%d of 300 changes failed: the test does not exercise both outcomes", failures)
	}
}
