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
		if got := m.Route(k(tc.keys...), false); got != tc.want {
			t.Errorf("Route(%q) = %q, want %q", tc.keys, got, tc.want)
		}
	}
	part, err := Parse([]byte(`nodes: [{id: a, host: h, port: 1, slots: ["0-12000"]}]`), "a")
	if err != nil {
		t.Fatal(err)
	}
	if got := part.Route(k("foo"), false); got != ErrUnbound {
		t.Errorf("unassigned slot: %q", got)
	}
	if got := part.Route(k("bar"), false); got != ErrClusterDown {
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
