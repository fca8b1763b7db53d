package reshard

import (
	"errors"
	"reflect"
	"testing"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/slots"
)

func parse(t *testing.T, doc string) *cluster.Map {
	t.Helper()
	m, err := cluster.Parse([]byte(doc), "a")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// apply returns the owners after plan, checking each move's source.
func apply(t *testing.T, m *cluster.Map, plan []Move) map[string]int {
	owners := m.Owners()
	for _, mv := range plan {
		if owners[mv.Slot] != mv.From {
			t.Fatalf("move %+v: slot owned by %s", mv, owners[mv.Slot])
		}
		owners[mv.Slot] = mv.To
	}
	count := map[string]int{}
	for _, o := range owners {
		count[o]++
	}
	return count
}

func TestPlan(t *testing.T) {
	three := `
nodes:
  - {id: a, host: h, port: 1, slots: ["0-8191"]}
  - {id: b, host: h, port: 2, slots: ["8192-16383"]}
  - {id: c, host: h, port: 3}
  - {id: r, host: h, port: 4, replica_of: a}
`
	m := parse(t, three)
	plan, err := Plan(m)
	if err != nil {
		t.Fatal(err)
	}
	if got := apply(t, m, plan); !reflect.DeepEqual(got, map[string]int{"a": 5462, "b": 5461, "c": 5461}) {
		t.Fatalf("after adding c: %v", got)
	}
	if len(plan) != 5461 {
		t.Fatalf("%d moves, want the 5461 c needs", len(plan))
	}
	// Balanced already: nothing to do.
	even := parse(t, `
nodes:
  - {id: a, host: h, port: 1, slots: ["0-8191"]}
  - {id: b, host: h, port: 2, slots: ["8192-16383"]}
`)
	if plan, _ := Plan(even); len(plan) != 0 {
		t.Fatalf("balanced map: %d moves", len(plan))
	}
	// Draining a node moves exactly its slots.
	plan, err = Plan(m, "b")
	if err != nil {
		t.Fatal(err)
	}
	if got := apply(t, m, plan); got["b"] != 0 || got["a"]+got["c"] != slots.N || got["c"] < 8191 {
		t.Fatalf("drain b: %v", got)
	}
	for _, mv := range plan {
		if mv.From != "b" {
			t.Fatalf("drain b moved a slot of %s", mv.From)
		}
	}
	if _, err := Plan(m, "zz"); !errors.Is(err, ErrUsage) {
		t.Fatalf("unknown node: %v", err)
	}
	if _, err := Plan(m, "a", "b", "c"); !errors.Is(err, ErrUsage) {
		t.Fatalf("everything excluded: %v", err)
	}
}

func TestSlotsAndOwners(t *testing.T) {
	got, err := ParseSlots("5, 0-2,2-3")
	if err != nil || !reflect.DeepEqual(got, []int{5, 0, 1, 2, 3}) {
		t.Fatalf("ParseSlots = %v, %v", got, err)
	}
	if Ranges(got) != "0-3,5" {
		t.Fatalf("Ranges = %s", Ranges(got))
	}
	for _, bad := range []string{"", "16384", "3-1", "x", "-1"} {
		if _, err := ParseSlots(bad); !errors.Is(err, ErrUsage) {
			t.Errorf("ParseSlots(%q) = %v", bad, err)
		}
	}
	m := parse(t, `
nodes:
  - {id: a, host: h, port: 1, slots: ["0-8191"]}
  - {id: b, host: h, port: 2, slots: ["8192-16383"]}
`)
	s := m.Spec()
	setOwner(&s, m, 100, "b")
	m2, err := s.Map("a")
	if err != nil || m2.Owner(100).ID != "b" || m2.Owner(99).ID != "a" || m2.Owner(101).ID != "a" || m2.Assigned != slots.N {
		t.Fatalf("setOwner: %v %+v", err, s.Nodes)
	}
}

func TestInitial(t *testing.T) {
	var nodes []cluster.NodeSpec
	for i := range 6 {
		nodes = append(nodes, cluster.NodeSpec{ID: string(rune('a' + i)), Host: "h", Port: 7000 + i})
	}
	s, err := Initial(nodes, 1)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Map("a")
	if err != nil || m.Size() != 3 || m.Assigned != slots.N || m.Node("d").ReplicaOf != 0 || m.Node("f").ReplicaOf != 2 {
		t.Fatalf("initial map: %v %+v", err, s)
	}
	if !reflect.DeepEqual(s.Nodes[0].Slots, []string{"0-5461"}) || !reflect.DeepEqual(s.Nodes[2].Slots, []string{"10923-16383"}) {
		t.Fatalf("ranges %v %v", s.Nodes[0].Slots, s.Nodes[2].Slots)
	}
	if _, err := Initial(nodes[:5], 1); !errors.Is(err, ErrUsage) {
		t.Fatalf("5 nodes, 1 replica each: %v", err)
	}
	if s, err := Initial(nodes[:1], 0); err != nil || s.Nodes[0].Slots[0] != "0-16383" {
		t.Fatalf("one node: %v %+v", err, s)
	}
}
