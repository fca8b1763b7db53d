// Package cluster is a cache node's view of a static Redis-Cluster-style
// topology: which node owns each of the 16384 hash slots, read from a
// config file (YAML or JSON) and held as an immutable Map carrying an
// epoch. A State swaps maps atomically, so a later topology source (a
// consensus store, resharding, failover) replaces the file without
// touching the request path, which reads one pointer per command.
package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"gopkg.in/yaml.v3"

	"github.com/portico-io/portico/cachenode/slots"
)

// Node is one member of the cluster.
type Node struct {
	ID   string
	Host string
	Port int
	// Ranges are the slot ranges the node owns, sorted.
	Ranges []Range
}

// Addr is host:port.
func (n *Node) Addr() string { return n.Host + ":" + strconv.Itoa(n.Port) }

// Range is an inclusive slot range.
type Range struct{ Start, End int }

// Map is an immutable slot map: never modify one after NewMap.
type Map struct {
	Epoch uint64
	// Nodes sorted by id; Self indexes this node.
	Nodes []Node
	Self  int
	owner [slots.N]int16 // index into Nodes, -1 = unassigned
	// Assigned is the number of slots with an owner.
	Assigned int
}

// Owner returns the node owning slot, or nil when no node does.
func (m *Map) Owner(slot int) *Node {
	if i := m.owner[slot]; i >= 0 {
		return &m.Nodes[i]
	}
	return nil
}

// Myself returns this node.
func (m *Map) Myself() *Node { return &m.Nodes[m.Self] }

// OK reports whether every slot is served (Redis's cluster_state:ok with
// cluster-require-full-coverage yes).
func (m *Map) OK() bool { return m.Assigned == slots.N }

// Size is the number of nodes owning at least one slot (cluster_size).
func (m *Map) Size() int {
	n := 0
	for i := range m.Nodes {
		if len(m.Nodes[i].Ranges) > 0 {
			n++
		}
	}
	return n
}

// Redirect errors, as Redis words them.
const (
	ErrCrossSlot   = "CROSSSLOT Keys in request don't hash to the same slot"
	ErrUnbound     = "CLUSTERDOWN Hash slot not served"
	ErrClusterDown = "CLUSTERDOWN The cluster is down"
)

// Route is what a node answers for a command with keys: "" to run it here,
// or the error reply without its '-' (MOVED, CROSSSLOT, CLUSTERDOWN), in the
// order Redis's getNodeByQuery checks them. asking is the connection's
// ASKING flag; it matters once slots migrate (an importing slot serves an
// ASKING client), and no slot does yet.
func (m *Map) Route(keys [][]byte, asking bool) string {
	if len(keys) == 0 {
		return ""
	}
	slot := slots.Of(keys[0])
	owner := m.owner[slot]
	if owner < 0 {
		return ErrUnbound
	}
	for _, k := range keys[1:] {
		if slots.Of(k) != slot {
			return ErrCrossSlot
		}
	}
	if !m.OK() {
		return ErrClusterDown
	}
	if int(owner) != m.Self {
		return "MOVED " + strconv.Itoa(slot) + " " + m.Nodes[owner].Addr()
	}
	return ""
}

// State holds the current Map; it is safe for concurrent use.
type State struct{ p atomic.Pointer[Map] }

// NewState returns a State holding m.
func NewState(m *Map) *State {
	s := &State{}
	s.p.Store(m)
	return s
}

// Load returns the current map.
func (s *State) Load() *Map { return s.p.Load() }

// Swap installs m if its epoch is higher than the current one's: ownership
// changes are fenced by the epoch, as they will be when the map comes from
// a consensus store.
func (s *State) Swap(m *Map) error {
	for {
		cur := s.p.Load()
		if cur != nil && m.Epoch <= cur.Epoch {
			return fmt.Errorf("cluster: new map has epoch %d, not above the current %d", m.Epoch, cur.Epoch)
		}
		if s.p.CompareAndSwap(cur, m) {
			return nil
		}
	}
}

// Spec is a cluster map as a document: the config file's fields, and the
// document a topology store holds (as JSON, without Myself).
type Spec struct {
	// Epoch of this map; a replacement must raise it.
	Epoch uint64 `yaml:"epoch" json:"epoch"`
	// Myself is this node's id (default: the node's --node-id).
	Myself string     `yaml:"myself,omitempty" json:"myself,omitempty"`
	Nodes  []NodeSpec `yaml:"nodes" json:"nodes"`
}

// NodeSpec is one node of a Spec.
type NodeSpec struct {
	ID   string `yaml:"id" json:"id"`
	Host string `yaml:"host" json:"host"`
	Port int    `yaml:"port" json:"port"`
	// Slots: "0-5460", "5461" (strings), or plain integers.
	Slots []string `yaml:"slots,omitempty" json:"slots,omitempty"`
}

// Parse reads a cluster config (YAML, or JSON, which YAML includes):
//
//	epoch: 1
//	myself: node-a          # optional: defaults to selfID
//	nodes:
//	  - {id: node-a, host: 10.0.0.1, port: 7000, slots: ["0-5460"]}
//	  - {id: node-b, host: 10.0.0.2, port: 7000, slots: ["5461-10922"]}
//	  - {id: node-c, host: 10.0.0.3, port: 7000, slots: ["10923-16383"]}
func Parse(data []byte, selfID string) (*Map, error) {
	f, err := ParseSpec(data)
	if err != nil {
		return nil, err
	}
	return f.Map(selfID)
}

// ParseSpec decodes a cluster config (YAML or JSON; unknown fields are
// errors) without validating it.
func ParseSpec(data []byte) (Spec, error) {
	var f Spec
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return Spec{}, fmt.Errorf("cluster: config: %w", err)
	}
	return f, nil
}

// Validate checks the spec as Map does, without a node of its own (what a
// tool publishing a map for every node checks).
func (f Spec) Validate() error {
	_, err := f.build("")
	return err
}

// Map builds the immutable map of the node selfID (Myself, when set, wins).
func (f Spec) Map(selfID string) (*Map, error) {
	if f.Myself != "" {
		selfID = f.Myself
	}
	m, err := f.build(selfID)
	if err != nil {
		return nil, err
	}
	if m.Self < 0 {
		return nil, fmt.Errorf("cluster: this node's id %q is not among the config's nodes", selfID)
	}
	return m, nil
}

// build validates f and builds its map; Self is -1 unless selfID is listed.
func (f Spec) build(selfID string) (*Map, error) {
	if len(f.Nodes) == 0 {
		return nil, errors.New("cluster: config lists no nodes")
	}
	if len(f.Nodes) > 1<<15-1 {
		return nil, errors.New("cluster: too many nodes")
	}
	m := &Map{Epoch: f.Epoch, Self: -1}
	specs := append([]NodeSpec(nil), f.Nodes...)
	sort.Slice(specs, func(i, j int) bool { return specs[i].ID < specs[j].ID })
	for i := range m.owner {
		m.owner[i] = -1
	}
	for i, ns := range specs {
		if ns.ID == "" || strings.ContainsAny(ns.ID, " \t\r\n") {
			return nil, fmt.Errorf("cluster: node %d: id %q must be non-empty without spaces", i, ns.ID)
		}
		if i > 0 && specs[i-1].ID == ns.ID {
			return nil, fmt.Errorf("cluster: node id %q listed twice", ns.ID)
		}
		if ns.Host == "" || strings.ContainsAny(ns.Host, " \t\r\n") {
			return nil, fmt.Errorf("cluster: node %s: host %q must be non-empty without spaces", ns.ID, ns.Host)
		}
		if ns.Port <= 0 || ns.Port > 65535 {
			return nil, fmt.Errorf("cluster: node %s: port %d out of range", ns.ID, ns.Port)
		}
		n := Node{ID: ns.ID, Host: ns.Host, Port: ns.Port}
		for _, s := range ns.Slots {
			r, err := parseRange(s)
			if err != nil {
				return nil, fmt.Errorf("cluster: node %s: %w", ns.ID, err)
			}
			for slot := r.Start; slot <= r.End; slot++ {
				if o := m.owner[slot]; o >= 0 {
					return nil, fmt.Errorf("cluster: slot %d assigned to both %s and %s", slot, specs[o].ID, ns.ID)
				}
				m.owner[slot] = int16(i)
				m.Assigned++
			}
		}
		if selfID != "" && ns.ID == selfID {
			m.Self = i
		}
		m.Nodes = append(m.Nodes, n)
	}
	// Ranges from the owner table: merged, sorted.
	for slot := 0; slot < slots.N; {
		o := m.owner[slot]
		end := slot
		for end+1 < slots.N && m.owner[end+1] == o {
			end++
		}
		if o >= 0 {
			m.Nodes[o].Ranges = append(m.Nodes[o].Ranges, Range{slot, end})
		}
		slot = end + 1
	}
	return m, nil
}

func parseRange(s string) (Range, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok {
		b = a
	}
	lo, err1 := strconv.Atoi(strings.TrimSpace(a))
	hi, err2 := strconv.Atoi(strings.TrimSpace(b))
	if err1 != nil || err2 != nil || lo < 0 || hi >= slots.N || lo > hi {
		return Range{}, fmt.Errorf("bad slot range %q (want N or N-M within 0-%d)", s, slots.N-1)
	}
	return Range{lo, hi}, nil
}
