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

// Node is one member of the cluster: a primary (which may own slots) or a
// replica of one.
type Node struct {
	ID   string
	Host string
	Port int
	// BusPort is the node-to-node port (replication, slot imports);
	// default Port + 10000, as Redis Cluster's bus port.
	BusPort int
	// Ranges are the slot ranges the node owns, sorted (none on replicas).
	Ranges []Range
	// ReplicaOf indexes the primary this node replicates (-1: a primary).
	ReplicaOf int
	// Replicas index this primary's replicas, sorted by id.
	Replicas []int
	// Failed: declared failed by a quorum of primaries (CLUSTER SHARDS
	// health "fail"); cleared when the node is seen again.
	Failed bool
}

// Addr is host:port.
func (n *Node) Addr() string { return n.Host + ":" + strconv.Itoa(n.Port) }

// BusAddr is host:busport.
func (n *Node) BusAddr() string { return n.Host + ":" + strconv.Itoa(n.BusPort) }

// IsReplica reports whether the node replicates a primary.
func (n *Node) IsReplica() bool { return n.ReplicaOf >= 0 }

// Range is an inclusive slot range.
type Range struct{ Start, End int }

// Migration states of a slot moving from one primary to another. A move
// goes through four published maps, each with a higher epoch, so that no
// mix of nodes on neighbouring epochs can bounce a client between them:
//
//	importing  owner From; To serves ASKING commands for the slot.
//	migrating  owner From; From serves keys it has and answers ASK To for
//	           missing ones while its mover copies keys to To.
//	handoff    owner To (the slot is empty on From); From answers ASK To
//	           for every key, so a client redirected by a node still on
//	           the migrating map lands on To with ASKING.
//	(removed)  owner To; From answers MOVED.
//
// The publisher (cachectl) waits for From and To to report an epoch
// before publishing the next step.
const (
	Importing = "importing"
	Migrating = "migrating"
	Handoff   = "handoff"
)

// MoveStatus is the progress of a slot a node migrates out.
type MoveStatus struct {
	Slot  int
	To    string
	Epoch uint64 // the map epoch the work started under
	Moved int64  // keys copied and deleted on the source
	Done  bool   // no key of the slot is left on the source
	Err   string // the last failure, empty after a success
}

// Migration is one slot in motion.
type Migration struct {
	Slot     int
	From, To int // node indexes
	State    string
}

// Map is an immutable slot map: never modify one after NewMap.
type Map struct {
	Epoch uint64
	// Nodes sorted by id; Self indexes this node.
	Nodes []Node
	Self  int
	owner [slots.N]int16 // index into Nodes, -1 = unassigned
	// Assigned is the number of slots with an owner.
	Assigned int
	// Migrations are the slots in motion, by slot.
	Migrations []Migration
	moving     map[int]int // slot -> index into Migrations
}

// Migration returns the slot's migration, or nil.
func (m *Map) Migration(slot int) *Migration {
	if i, ok := m.moving[slot]; ok {
		return &m.Migrations[i]
	}
	return nil
}

// Primary returns the primary n replicates, or n itself.
func (m *Map) Primary(n *Node) *Node {
	if n.ReplicaOf >= 0 {
		return &m.Nodes[n.ReplicaOf]
	}
	return n
}

// Node returns the node with id, or nil.
func (m *Map) Node(id string) *Node {
	i := sort.Search(len(m.Nodes), func(i int) bool { return m.Nodes[i].ID >= id })
	if i < len(m.Nodes) && m.Nodes[i].ID == id {
		return &m.Nodes[i]
	}
	return nil
}

// Index returns n's index in Nodes.
func (m *Map) Index(n *Node) int {
	for i := range m.Nodes {
		if &m.Nodes[i] == n {
			return i
		}
	}
	return -1
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

// Quorum is how many primaries owning slots must agree that a node failed:
// a majority of cluster_size, as Redis Cluster's failure reports.
func (m *Map) Quorum() int { return m.Size()/2 + 1 }

// Redirect errors, as Redis words them.
const (
	ErrCrossSlot   = "CROSSSLOT Keys in request don't hash to the same slot"
	ErrUnbound     = "CLUSTERDOWN Hash slot not served"
	ErrClusterDown = "CLUSTERDOWN The cluster is down"
	ErrTryAgain    = "TRYAGAIN Multiple keys request during rehashing of slot"
)

// Query is what routing needs to know about a command and its connection.
type Query struct {
	// Asking: the connection sent ASKING just before this command.
	Asking bool
	// ReadOnly: the connection sent READONLY (replica reads allowed).
	ReadOnly bool
	// Write: the command may modify keys.
	Write bool
}

// Route is what a node answers for a command with keys, before it runs:
// "" to run it here, or the error reply without its '-' (MOVED, CROSSSLOT,
// CLUSTERDOWN, ASK), in the order Redis's getNodeByQuery checks them.
// check >= 0 names a slot migrating out of or importing into this node
// whose answer depends on which of the keys exist here: the caller locks
// the keys, counts them and asks RouteMoving(check, ...), so the answer
// and the command are atomic with the slot's mover.
func (m *Map) Route(keys [][]byte, q Query) (redirect string, check int) {
	if len(keys) == 0 {
		return "", -1
	}
	slot := slots.Of(keys[0])
	owner := m.owner[slot]
	if owner < 0 {
		return ErrUnbound, -1
	}
	for _, k := range keys[1:] {
		if slots.Of(k) != slot {
			return ErrCrossSlot, -1
		}
	}
	if !m.OK() {
		return ErrClusterDown, -1
	}
	if mg := m.Migration(slot); mg != nil {
		switch {
		case mg.State == Migrating && mg.From == m.Self:
			return "", slot
		case mg.State == Handoff && mg.From == m.Self:
			return m.ask(slot, mg.To), -1
		case (mg.State == Importing || mg.State == Migrating) && mg.To == m.Self && q.Asking:
			if len(keys) > 1 {
				return "", slot // TRYAGAIN unless every key is here
			}
			return "", -1
		}
	}
	if int(owner) == m.Self {
		return "", -1
	}
	if q.ReadOnly && !q.Write && m.Nodes[m.Self].ReplicaOf == int(owner) {
		return "", -1
	}
	return m.moved(slot, int(owner)), -1
}

// RouteMoving finishes Route for a slot it returned as check, given how
// many of the command's keys exist on this node.
func (m *Map) RouteMoving(slot int, q Query, present, missing int) string {
	mg := m.Migration(slot)
	if mg == nil {
		return ""
	}
	if mg.From == m.Self {
		if missing == 0 {
			return ""
		}
		if present > 0 {
			return ErrTryAgain
		}
		return m.ask(slot, mg.To)
	}
	if missing > 0 { // importing, ASKING, several keys
		return ErrTryAgain
	}
	return ""
}

func (m *Map) moved(slot, node int) string {
	return "MOVED " + strconv.Itoa(slot) + " " + m.Nodes[node].Addr()
}

func (m *Map) ask(slot, node int) string {
	return "ASK " + strconv.Itoa(slot) + " " + m.Nodes[node].Addr()
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
	// Migrations are the slots in motion (see Importing).
	Migrations []MigrationSpec `yaml:"migrations,omitempty" json:"migrations,omitempty"`
}

// MigrationSpec is one slot in motion.
type MigrationSpec struct {
	Slot  int    `yaml:"slot" json:"slot"`
	From  string `yaml:"from" json:"from"`
	To    string `yaml:"to" json:"to"`
	State string `yaml:"state" json:"state"`
}

// NodeSpec is one node of a Spec.
type NodeSpec struct {
	ID   string `yaml:"id" json:"id"`
	Host string `yaml:"host" json:"host"`
	Port int    `yaml:"port" json:"port"`
	// BusPort is the node-to-node port (default Port + 10000).
	BusPort int `yaml:"bus_port,omitempty" json:"bus_port,omitempty"`
	// Slots: "0-5460", "5461" (strings), or plain integers.
	Slots []string `yaml:"slots,omitempty" json:"slots,omitempty"`
	// ReplicaOf is the id of the primary this node replicates; a replica
	// owns no slots.
	ReplicaOf string `yaml:"replica_of,omitempty" json:"replica_of,omitempty"`
	// Failed: declared failed by a quorum of primaries.
	Failed bool `yaml:"failed,omitempty" json:"failed,omitempty"`
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
		if ns.BusPort < 0 || ns.BusPort > 65535 {
			return nil, fmt.Errorf("cluster: node %s: bus_port %d out of range", ns.ID, ns.BusPort)
		}
		n := Node{ID: ns.ID, Host: ns.Host, Port: ns.Port, BusPort: ns.BusPort, ReplicaOf: -1, Failed: ns.Failed}
		if n.BusPort == 0 {
			n.BusPort = ns.Port + 10000
			if n.BusPort > 65535 {
				return nil, fmt.Errorf("cluster: node %s: port %d + 10000 is not a port; set bus_port", ns.ID, ns.Port)
			}
		}
		if ns.ReplicaOf != "" && len(ns.Slots) > 0 {
			return nil, fmt.Errorf("cluster: node %s replicates %s and cannot own slots", ns.ID, ns.ReplicaOf)
		}
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
	for i, ns := range specs {
		if ns.ReplicaOf == "" {
			continue
		}
		p := m.Node(ns.ReplicaOf)
		switch {
		case p == nil:
			return nil, fmt.Errorf("cluster: node %s replicates %q, which is not listed", ns.ID, ns.ReplicaOf)
		case p.ID == ns.ID:
			return nil, fmt.Errorf("cluster: node %s cannot replicate itself", ns.ID)
		case specs[m.Index(p)].ReplicaOf != "":
			return nil, fmt.Errorf("cluster: node %s replicates %s, itself a replica (no chains)", ns.ID, p.ID)
		}
		pi := m.Index(p)
		m.Nodes[i].ReplicaOf = pi
		p.Replicas = append(p.Replicas, i)
	}
	m.moving = map[int]int{}
	for _, ms := range f.Migrations {
		if ms.Slot < 0 || ms.Slot >= slots.N {
			return nil, fmt.Errorf("cluster: migration of slot %d: no such slot", ms.Slot)
		}
		if _, dup := m.moving[ms.Slot]; dup {
			return nil, fmt.Errorf("cluster: slot %d migrates twice", ms.Slot)
		}
		from, to := m.Node(ms.From), m.Node(ms.To)
		if from == nil || to == nil || from == to || from.IsReplica() || to.IsReplica() {
			return nil, fmt.Errorf("cluster: migration of slot %d: from %q to %q must name two primaries", ms.Slot, ms.From, ms.To)
		}
		mg := Migration{Slot: ms.Slot, From: m.Index(from), To: m.Index(to), State: ms.State}
		owner := int(m.owner[ms.Slot])
		switch ms.State {
		case Importing, Migrating:
			if owner != mg.From {
				return nil, fmt.Errorf("cluster: slot %d %s from %s, which does not own it", ms.Slot, ms.State, ms.From)
			}
		case Handoff:
			if owner != mg.To {
				return nil, fmt.Errorf("cluster: slot %d handed off to %s, which does not own it", ms.Slot, ms.To)
			}
		default:
			return nil, fmt.Errorf("cluster: migration of slot %d: state %q (want %s, %s or %s)", ms.Slot, ms.State, Importing, Migrating, Handoff)
		}
		m.moving[ms.Slot] = len(m.Migrations)
		m.Migrations = append(m.Migrations, mg)
	}
	sort.Slice(m.Migrations, func(i, j int) bool { return m.Migrations[i].Slot < m.Migrations[j].Slot })
	for i, mg := range m.Migrations {
		m.moving[mg.Slot] = i
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

// Spec returns the map as a document (without Myself): what a publisher
// edits to derive the next map.
func (m *Map) Spec() Spec {
	f := Spec{Epoch: m.Epoch}
	for i := range m.Nodes {
		n := &m.Nodes[i]
		ns := NodeSpec{ID: n.ID, Host: n.Host, Port: n.Port, Failed: n.Failed}
		if n.BusPort != n.Port+10000 {
			ns.BusPort = n.BusPort
		}
		if n.ReplicaOf >= 0 {
			ns.ReplicaOf = m.Nodes[n.ReplicaOf].ID
		}
		for _, r := range n.Ranges {
			if r.Start == r.End {
				ns.Slots = append(ns.Slots, strconv.Itoa(r.Start))
			} else {
				ns.Slots = append(ns.Slots, strconv.Itoa(r.Start)+"-"+strconv.Itoa(r.End))
			}
		}
		f.Nodes = append(f.Nodes, ns)
	}
	for _, mg := range m.Migrations {
		f.Migrations = append(f.Migrations, MigrationSpec{Slot: mg.Slot, From: m.Nodes[mg.From].ID, To: m.Nodes[mg.To].ID, State: mg.State})
	}
	return f
}

// Owners returns the owner id of every slot ("" = unassigned).
func (m *Map) Owners() []string {
	out := make([]string, slots.N)
	for s, o := range m.owner {
		if o >= 0 {
			out[s] = m.Nodes[o].ID
		}
	}
	return out
}
