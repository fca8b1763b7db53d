// Package nodes tracks every connected xDS client of this control-plane
// replica: who it is (id, cluster, group), when it connected, and per type
// URL the last version it ACKed and the last version it NACKed with the
// error it gave. The xDS server feeds it; the admin API and the rollout
// controller read it.
//
// A node on a delta xDS stream is sent nothing for a type whose resources a
// new version leaves as they were: the server records it at that version
// with AckUnchanged (TypeStatus.Unchanged), since the node holds exactly
// that content, so the node view and rollouts see it current.
//
// A node whose streams keep ending before it answers what it was sent (a
// response larger than it can receive, one the server could not send) is
// failing: it is listed with State "failing" and its last stream error,
// even between its reconnects, for FailureRetention after its last stream
// closed, until it ACKs again.
package nodes

import (
	"slices"
	"sort"
	"sync"
	"time"
)

// DefaultGroup is the group of a node whose metadata names none.
const DefaultGroup = "default"

// Node states.
const (
	StateOK      = "ok"
	StateFailing = "failing"
)

// FailingAfter is how many stream failures in a row make a node failing:
// one alone may be a client restarting mid-response.
const FailingAfter = 2

// DefaultFailureRetention is how long a failing node stays listed after its
// last stream closed (its reconnect backoff may reach tens of seconds).
const DefaultFailureRetention = 10 * time.Minute

// StreamFailure is the last time a node's stream ended before the node
// answered what it was sent.
type StreamFailure struct {
	Error string    `json:"error"`
	At    time.Time `json:"at"`
	// Count is the failures in a row; an ACK of a type that failed resets it.
	Count int `json:"count"`
}

// Nack is the last rejection of a type by a node.
type Nack struct {
	Version string    `json:"version"`
	Error   string    `json:"error"`
	At      time.Time `json:"at"`
}

// TypeStatus is a node's state for one resource type URL.
type TypeStatus struct {
	AckedVersion string    `json:"ackedVersion"`
	AckedAt      time.Time `json:"ackedAt,omitzero"`
	// Unchanged says AckedVersion was reached without a response: its
	// resources equal those the node last ACKed (AckUnchanged).
	Unchanged bool `json:"unchanged,omitempty"`
	// SentVersion is the last version sent and not yet answered ("" when answered).
	SentVersion string `json:"sentVersion,omitempty"`
	Nack        *Nack  `json:"nack,omitempty"`
	// sentAt is when SentVersion was sent (zero when answered): the
	// staleness collector counts responses left unanswered too long.
	sentAt time.Time
}

// Status is a snapshot of one node, safe to keep and marshal.
type Status struct {
	ID      string `json:"id"`
	Cluster string `json:"cluster"`
	Group   string `json:"group"`
	// Identity is the node's verified workload identity (SPIFFE ID); empty
	// when the xDS server runs without one (plaintext debugging mode).
	Identity string `json:"identity,omitempty"`
	// SecurityChannel nodes (extauthz) always receive the latest version;
	// rollouts neither hold them back nor count them (compile.View).
	SecurityChannel bool                   `json:"securityChannel,omitempty"`
	ConnectedAt     time.Time              `json:"connectedAt"`
	Streams         int                    `json:"streams"`
	Types           map[string]*TypeStatus `json:"types"`
	// State is StateFailing after FailingAfter stream failures in a row,
	// else StateOK. A failing node is listed with Streams 0 between its
	// reconnects.
	State string `json:"state"`
	// LastStreamError is the node's last stream failure, until it ACKs
	// a type that failed.
	LastStreamError *StreamFailure `json:"lastStreamError,omitempty"`
	// Replica is the control-plane replica serving the node; set by the
	// fleet view, empty in a single tracker.
	Replica string `json:"replica,omitempty"`
}

type node struct {
	Status
	lastSeen time.Time
}

// Observer is told about every ACK and NACK, after the tracker records it.
// It must not block, nor call the xDS server: it may run under the
// server's lock.
type Observer func(nodeID, typeURL, version string, nack bool)

// Tracker is safe for concurrent use.
type Tracker struct {
	// FailureRetention: see DefaultFailureRetention; set before use.
	FailureRetention time.Duration

	mu        sync.Mutex
	nodes     map[string]*node
	failures  map[string]*failure
	observers []Observer
	timeNow   func() time.Time
}

// failure is a node's run of stream failures; gone is its status when its
// last stream closed (nil while connected).
type failure struct {
	StreamFailure
	types []string
	gone  *Status
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker {
	return &Tracker{nodes: map[string]*node{}, failures: map[string]*failure{}, timeNow: time.Now}
}

// StreamFailed records that a stream of node id ended (or could not send)
// before the node answered what it was sent of typeURLs; message says what.
// Call it before Disconnect of that stream. The run of failures ends when
// the node ACKs one of those types.
func (t *Tracker) StreamFailed(id string, typeURLs []string, message string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.failures[id]
	if !ok {
		f = &failure{}
		t.failures[id] = f
	}
	f.Error, f.At = message, t.timeNow()
	f.Count++
	f.types = typeURLs
}

// Observe registers fn for every later ACK and NACK.
func (t *Tracker) Observe(fn Observer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.observers = append(t.observers, fn)
}

// Connect records a stream of node id opening (or re-identifying). Several
// streams of one node are counted; the node is listed until the last closes.
func (t *Tracker) Connect(id, cluster, group, identity string, securityChannel bool) {
	if group == "" {
		group = DefaultGroup
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.nodes[id]
	if !ok {
		n = &node{Status: Status{ID: id, ConnectedAt: t.timeNow(), Types: map[string]*TypeStatus{}}}
		t.nodes[id] = n
	}
	n.Cluster, n.Group, n.Identity, n.SecurityChannel = cluster, group, identity, securityChannel
	n.Streams++
	if f, ok := t.failures[id]; ok {
		f.gone = nil
	}
}

// Disconnect records one stream of node id closing.
func (t *Tracker) Disconnect(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.nodes[id]
	if !ok {
		return
	}
	n.Streams--
	if n.Streams <= 0 {
		delete(t.nodes, id)
		if f, ok := t.failures[id]; ok {
			st := n.copy()
			st.Streams = 0
			f.gone = &st
		}
	}
}

func (t *Tracker) typeStatus(id, typeURL string) *TypeStatus {
	n, ok := t.nodes[id]
	if !ok {
		return nil
	}
	ts, ok := n.Types[typeURL]
	if !ok {
		ts = &TypeStatus{}
		n.Types[typeURL] = ts
	}
	return ts
}

// Sent records that version of typeURL was sent to node id.
func (t *Tracker) Sent(id, typeURL, version string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ts := t.typeStatus(id, typeURL); ts != nil {
		ts.SentVersion, ts.sentAt = version, t.timeNow()
	}
}

// Ack records that node id applied version of typeURL.
func (t *Tracker) Ack(id, typeURL, version string) {
	t.mu.Lock()
	ts := t.typeStatus(id, typeURL)
	if ts == nil {
		t.mu.Unlock()
		return
	}
	ts.AckedVersion, ts.AckedAt, ts.Unchanged = version, t.timeNow(), false
	if ts.SentVersion == version {
		ts.SentVersion, ts.sentAt = "", time.Time{}
	}
	// An ACK of a type that failed proves the node receives it now.
	if f, ok := t.failures[id]; ok && slices.Contains(f.types, typeURL) {
		delete(t.failures, id)
	}
	obs := t.observers
	t.mu.Unlock()
	for _, fn := range obs {
		fn(id, typeURL, version, false)
	}
}

// AckUnchanged records that node id holds version of typeURL without having
// ACKed it: the xDS server found the type's resources at version equal to
// those the node holds (its last ACKed state), so there was nothing to send.
// It is not an ACK: observers are not told, and it proves nothing about a
// stream failure. A type already at version, or never sent to the node, is
// left as it is; the result says whether the record changed.
func (t *Tracker) AckUnchanged(id, typeURL, version string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.nodes[id]
	if !ok {
		return false
	}
	ts, ok := n.Types[typeURL]
	if !ok || ts.AckedVersion == version {
		return false
	}
	ts.AckedVersion, ts.AckedAt, ts.Unchanged = version, t.timeNow(), true
	if ts.SentVersion == version {
		ts.SentVersion, ts.sentAt = "", time.Time{}
	}
	return true
}

// Nack records that node id rejected version of typeURL with message.
func (t *Tracker) Nack(id, typeURL, version, message string) {
	t.mu.Lock()
	ts := t.typeStatus(id, typeURL)
	if ts == nil {
		t.mu.Unlock()
		return
	}
	ts.Nack = &Nack{Version: version, Error: message, At: t.timeNow()}
	if ts.SentVersion == version {
		ts.SentVersion, ts.sentAt = "", time.Time{}
	}
	obs := t.observers
	t.mu.Unlock()
	for _, fn := range obs {
		fn(id, typeURL, version, true)
	}
}

// NackedVersion returns the version node id last NACKed for typeURL, if any.
func (t *Tracker) NackedVersion(id, typeURL string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.nodes[id]
	if !ok {
		return "", false
	}
	ts, ok := n.Types[typeURL]
	if !ok || ts.Nack == nil {
		return "", false
	}
	return ts.Nack.Version, true
}

// Get returns a copy of node id's status.
func (t *Tracker) Get(id string) (Status, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneLocked()
	if n, ok := t.nodes[id]; ok {
		return t.withFailureLocked(n.copy()), true
	}
	if f, ok := t.failures[id]; ok && f.gone != nil && f.Count >= FailingAfter {
		return t.withFailureLocked(copyStatus(*f.gone)), true
	}
	return Status{}, false
}

// List returns a copy of every node's status, ordered by id.
func (t *Tracker) List() []Status {
	t.mu.Lock()
	t.pruneLocked()
	out := make([]Status, 0, len(t.nodes))
	for _, n := range t.nodes {
		out = append(out, t.withFailureLocked(n.copy()))
	}
	for id, f := range t.failures {
		if _, ok := t.nodes[id]; !ok && f.gone != nil && f.Count >= FailingAfter {
			out = append(out, t.withFailureLocked(copyStatus(*f.gone)))
		}
	}
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// pruneLocked forgets failures of nodes gone for FailureRetention.
func (t *Tracker) pruneLocked() {
	keep := t.FailureRetention
	if keep <= 0 {
		keep = DefaultFailureRetention
	}
	for id, f := range t.failures {
		if f.gone != nil && t.timeNow().Sub(f.At) > keep {
			delete(t.failures, id)
		}
	}
}

// withFailureLocked sets s's State and LastStreamError.
func (t *Tracker) withFailureLocked(s Status) Status {
	s.State = StateOK
	if f, ok := t.failures[s.ID]; ok {
		sf := f.StreamFailure
		s.LastStreamError = &sf
		if f.Count >= FailingAfter {
			s.State = StateFailing
		}
	}
	return s
}

func (n *node) copy() Status { return copyStatus(n.Status) }

func copyStatus(s Status) Status {
	src := s.Types
	s.Types = make(map[string]*TypeStatus, len(src))
	for k, v := range src {
		c := *v
		if v.Nack != nil {
			nk := *v.Nack
			c.Nack = &nk
		}
		s.Types[k] = &c
	}
	return s
}
