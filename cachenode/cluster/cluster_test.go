package cluster

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/portico-io/portico/cachenode/slots"
)

const three = `
epoch: 3
nodes:
  - {id: b, host: 127.0.0.1, port: 7001, slots: ["5461-10922"]}
  - {id: a, host: 127.0.0.1, port: 7000, slots: ["0-100", "101-5460"]}
  - {id: c, host: 127.0.0.1, port: 7002, slots: ["10923-16383"]}
`

func TestParse(t *testing.T) {
	m, err := Parse([]byte(three), "b")
	if err != nil {
		t.Fatal(err)
	}
	if m.Epoch != 3 || m.Myself().ID != "b" || !m.OK() || m.Size() != 3 || m.Assigned != slots.N {
		t.Fatalf("map = epoch %d self %s ok %v size %d", m.Epoch, m.Myself().ID, m.OK(), m.Size())
	}
	if got := m.Nodes[0].Ranges; !reflect.DeepEqual(got, []Range{{0, 5460}}) {
		t.Fatalf("a's ranges = %v (adjacent ranges merge)", got)
	}
	if m.Owner(5461).ID != "b" || m.Owner(16383).ID != "c" || m.Owner(0).ID != "a" {
		t.Fatal("owners wrong")
	}
	// JSON is YAML too; myself in the file wins over the node id.
	j := `{"epoch": 1, "myself": "x", "nodes": [{"id": "x", "host": "h", "port": 1, "slots": ["0-16383"]}, {"id": "y", "host": "h", "port": 2}]}`
	if m, err := Parse([]byte(j), "y"); err != nil || m.Myself().ID != "x" || m.Size() != 1 || len(m.Nodes) != 2 {
		t.Fatalf("JSON: %v %v", m, err)
	}
	for _, bad := range []struct{ file, want string }{
		{`nodes: []`, "no nodes"},
		{`nodes: [{id: a, host: h, port: 1, slots: ["0-16384"]}]`, "bad slot range"},
		{`nodes: [{id: a, host: h, port: 1, slots: ["5-4"]}]`, "bad slot range"},
		{`nodes: [{id: a, host: h, port: 1, slots: ["x"]}]`, "bad slot range"},
		{`nodes: [{id: a, host: h, port: 1, slots: ["0-10"]}, {id: b, host: h, port: 2, slots: ["10"]}]`, "slot 10 assigned to both a and b"},
		{`nodes: [{id: a, host: h, port: 1}, {id: a, host: h, port: 2}]`, "listed twice"},
		{`nodes: [{id: "a b", host: h, port: 1}]`, "without spaces"},
		{`nodes: [{id: a, host: h, port: 0}]`, "port 0"},
		{`nodes: [{id: a, host: "", port: 1}]`, "host"},
		{`nodes: [{id: z, host: h, port: 1}]`, "not among"},
		{`nodes: [{id: a, host: h, port: 1, slot: ["1"]}]`, "field slot not found"},
	} {
		if _, err := Parse([]byte(bad.file), "a"); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Parse(%s) = %v, want %q", bad.file, err, bad.want)
		}
	}
}

func TestRoute(t *testing.T) {
	m, err := Parse([]byte(three), "a")
	if err != nil {
		t.Fatal(err)
	}
	k := func(ss ...string) [][]byte {
		out := make([][]byte, len(ss))
		for i, s := range ss {
			out[i] = []byte(s)
		}
		return out
	}
	// "bar" is slot 5061 (a), "foo" 12182 (c).
	for _, tc := range []struct {
		keys []string
		want string
	}{
		{nil, ""},
		{[]string{"bar"}, ""},
		{[]string{"foo"}, "MOVED 12182 127.0.0.1:7002"},
		{[]string{"{foo}1", "{foo}2"}, "MOVED 12182 127.0.0.1:7002"},
		{[]string{"bar", "foo"}, ErrCrossSlot},
		{[]string{"{bar}x", "bar", "{bar}"}, ""},
	} {
		if got, check := m.Route(k(tc.keys...), Query{}); got != tc.want || check != -1 {
			t.Errorf("Route(%q) = %q, want %q", tc.keys, got, tc.want)
		}
	}
	part, err := Parse([]byte(`nodes: [{id: a, host: h, port: 1, slots: ["0-12000"]}]`), "a")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := part.Route(k("foo"), Query{}); got != ErrUnbound {
		t.Errorf("unassigned slot: %q", got)
	}
	if got, _ := part.Route(k("bar"), Query{}); got != ErrClusterDown {
		t.Errorf("owned slot, incomplete coverage: %q", got)
	}
}

func TestStateSwapFencesEpoch(t *testing.T) {
	m3, _ := Parse([]byte(three), "a")
	s := NewState(m3)
	m2, _ := Parse([]byte(strings.Replace(three, "epoch: 3", "epoch: 2", 1)), "a")
	if err := s.Swap(m2); err == nil || s.Load() != m3 {
		t.Fatal("a lower epoch replaced the map")
	}
	if err := s.Swap(m3); err == nil {
		t.Fatal("the same epoch replaced the map")
	}
	m4, _ := Parse([]byte(strings.Replace(three, "epoch: 3", "epoch: 4", 1)), "a")
	if err := s.Swap(m4); err != nil || s.Load() != m4 {
		t.Fatalf("higher epoch: %v", err)
	}
}

func TestWatcher(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(three)
	w := &Watcher{Path: path, SelfID: "a"}
	st, err := w.Load()
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		file    string
		applied bool
		epoch   uint64
	}{
		{three, false, 3}, // unchanged
		{"nodes: [", false, 3},
		{strings.Replace(three, "epoch: 3", "epoch: 1", 1), false, 3},
		{strings.Replace(three, "epoch: 3", "epoch: 5", 1), true, 5},
	} {
		write(tc.file)
		applied, err := w.check()
		if applied != tc.applied || st.Load().Epoch != tc.epoch {
			t.Errorf("step %d: applied %v (%v), epoch %d; want %v, %d", i, applied, err, st.Load().Epoch, tc.applied, tc.epoch)
		}
	}
}

func TestSpecValidateAndJSON(t *testing.T) {
	s, err := ParseSpec([]byte(three))
	if err != nil || s.Epoch != 3 || len(s.Nodes) != 3 {
		t.Fatalf("ParseSpec: %+v %v", s, err)
	}
	if err := s.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if _, err := s.Map("nobody"); err == nil || !strings.Contains(err.Error(), "not among") {
		t.Fatalf("Map of a node not listed: %v", err)
	}
	s.Nodes[0].Slots = []string{"0-5461"}
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "assigned to both") {
		t.Fatalf("overlap: %v", err)
	}
}

// sixNodes: three primaries with a replica each; slot 5061 ("bar") moving
// from a to b in the state given.
func sixNodes(t *testing.T, self, state string) *Map {
	t.Helper()
	doc := `
epoch: 9
nodes:
  - {id: a, host: h, port: 7000, slots: ["0-5460"]}
  - {id: b, host: h, port: 7001, slots: ["5461-10922"]}
  - {id: c, host: h, port: 7002, slots: ["10923-16383"]}
  - {id: a2, host: h, port: 7003, replica_of: a}
  - {id: b2, host: h, port: 7004, replica_of: b, failed: true}
  - {id: c2, host: h, port: 7005, replica_of: c, bus_port: 9999}
`
	if state == Handoff {
		doc = strings.Replace(doc, `"0-5460"`, `"0-5060", "5062-5460"`, 1)
		doc = strings.Replace(doc, `"5461-10922"`, `"5061", "5461-10922"`, 1)
	}
	if state != "" {
		doc += "migrations: [{slot: 5061, from: a, to: b, state: " + state + "}]\n"
	}
	m, err := Parse([]byte(doc), self)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestReplicasAndSpecRoundTrip(t *testing.T) {
	m := sixNodes(t, "a2", "")
	if m.Size() != 3 || m.Quorum() != 2 || !m.Myself().IsReplica() || m.Primary(m.Myself()).ID != "a" {
		t.Fatalf("size %d quorum %d", m.Size(), m.Quorum())
	}
	if a := m.Node("a"); len(a.Replicas) != 1 || m.Nodes[a.Replicas[0]].ID != "a2" || a.BusPort != 17000 {
		t.Fatalf("a = %+v", a)
	}
	if c2 := m.Node("c2"); c2.BusAddr() != "h:9999" || !m.Node("b2").Failed {
		t.Fatal("bus port or failed flag lost")
	}
	// Spec() is the document the map came from: rebuilding gives the same map.
	back, err := m.Spec().Map("a2")
	if err != nil || !reflect.DeepEqual(back.Spec(), m.Spec()) || back.owner != m.owner {
		t.Fatalf("round trip: %v\n%+v\n%+v", err, back.Spec(), m.Spec())
	}
	mg := sixNodes(t, "a", Migrating)
	back, err = mg.Spec().Map("a")
	if err != nil || !reflect.DeepEqual(back.Migrations, mg.Migrations) || back.Migration(5061) == nil {
		t.Fatalf("migrations round trip: %v %+v", err, back.Migrations)
	}
	for _, bad := range []struct{ doc, want string }{
		{`nodes: [{id: a, host: h, port: 1, slots: ["0-16383"]}, {id: r, host: h, port: 2, replica_of: x}]`, "not listed"},
		{`nodes: [{id: a, host: h, port: 1, slots: ["0-16383"]}, {id: r, host: h, port: 2, replica_of: a, slots: ["1"]}]`, "cannot own slots"},
		{`nodes: [{id: a, host: h, port: 1, replica_of: a}]`, "itself"},
		{`nodes: [{id: a, host: h, port: 1}, {id: b, host: h, port: 2, replica_of: a}, {id: c, host: h, port: 3, replica_of: b}]`, "no chains"},
		{`nodes: [{id: a, host: h, port: 60000}]`, "set bus_port"},
		{`{nodes: [{id: a, host: h, port: 1, slots: ["0-16383"]}, {id: b, host: h, port: 2}], migrations: [{slot: 1, from: b, to: a, state: migrating}]}`, "does not own it"},
		{`{nodes: [{id: a, host: h, port: 1, slots: ["0-16383"]}, {id: b, host: h, port: 2}], migrations: [{slot: 1, from: b, to: a, state: handoff}]}`, ""},
		{`{nodes: [{id: a, host: h, port: 1, slots: ["0-16383"]}, {id: b, host: h, port: 2}], migrations: [{slot: 1, from: a, to: b, state: handoff}]}`, "does not own it"},
		{`{nodes: [{id: a, host: h, port: 1, slots: ["0-16383"]}, {id: b, host: h, port: 2}], migrations: [{slot: 1, from: a, to: b, state: moving}]}`, "state"},
		{`{nodes: [{id: a, host: h, port: 1, slots: ["0-16383"]}, {id: b, host: h, port: 2}], migrations: [{slot: 1, from: a, to: a, state: importing}]}`, "two primaries"},
		{`{nodes: [{id: a, host: h, port: 1, slots: ["0-16383"]}, {id: b, host: h, port: 2}], migrations: [{slot: 1, from: a, to: b, state: importing}, {slot: 1, from: a, to: b, state: migrating}]}`, "twice"},
	} {
		_, err := Parse([]byte(bad.doc), "a")
		if bad.want == "" {
			if err != nil {
				t.Errorf("Parse(%s) = %v, want success", bad.doc, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Parse(%s) = %v, want %q", bad.doc, err, bad.want)
		}
	}
}

// TestRouteMovingAndReplicas: Redis's getNodeByQuery rules for a slot in
// each migration state, on the source, the target and a bystander, and
// for replica reads.
func TestRouteMovingAndReplicas(t *testing.T) {
	bar := [][]byte{[]byte("bar")}                      // slot 5061
	two := [][]byte{[]byte("{bar}1"), []byte("{bar}2")} // slot 5061 too
	type tc struct {
		self, state string
		keys        [][]byte
		q           Query
		want        string
		check       bool
	}
	askB, movedA, movedB := "ASK 5061 h:7001", "MOVED 5061 h:7000", "MOVED 5061 h:7001"
	for i, c := range []tc{
		{"a", Importing, bar, Query{}, "", false},
		{"b", Importing, bar, Query{}, movedA, false},
		{"b", Importing, bar, Query{Asking: true}, "", false},
		{"b", Importing, two, Query{Asking: true}, "", true},
		{"a", Migrating, bar, Query{}, "", true},
		{"b", Migrating, bar, Query{Asking: true}, "", false},
		{"b", Migrating, bar, Query{}, movedA, false},
		{"c", Migrating, bar, Query{Asking: true}, movedA, false},
		{"a", Handoff, bar, Query{}, askB, false},
		{"b", Handoff, bar, Query{}, "", false},
		{"c", Handoff, bar, Query{}, movedB, false},
		{"a", "", bar, Query{}, "", false},
		{"a2", "", bar, Query{}, movedA, false},
		{"a2", "", bar, Query{ReadOnly: true}, "", false},
		{"a2", "", bar, Query{ReadOnly: true, Write: true}, movedA, false},
		{"b2", "", bar, Query{ReadOnly: true}, movedA, false},
	} {
		m := sixNodes(t, c.self, c.state)
		got, check := m.Route(c.keys, c.q)
		if got != c.want || (check >= 0) != c.check {
			t.Errorf("%d: %s %s %+v: Route = %q, %d; want %q, check %v", i, c.self, c.state, c.q, got, check, c.want, c.check)
		}
	}
	src := sixNodes(t, "a", Migrating)
	for _, c := range []struct {
		present, missing int
		want             string
	}{{1, 0, ""}, {0, 1, askB}, {1, 1, ErrTryAgain}, {2, 0, ""}} {
		if got := src.RouteMoving(5061, Query{}, c.present, c.missing); got != c.want {
			t.Errorf("source, %d present %d missing: %q, want %q", c.present, c.missing, got, c.want)
		}
	}
	dst := sixNodes(t, "b", Importing)
	if got := dst.RouteMoving(5061, Query{Asking: true}, 1, 1); got != ErrTryAgain {
		t.Errorf("target, one key missing: %q", got)
	}
	if got := dst.RouteMoving(5061, Query{Asking: true}, 2, 0); got != "" {
		t.Errorf("target, all keys here: %q", got)
	}
}
