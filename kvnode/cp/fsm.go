package cp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"
)

// Entry is one key's value and its revision: the Raft log index of the
// command that last wrote it. Revisions only grow (across keys too), so a
// revision is usable as a fencing token. Revision 0 means "absent".
type Entry struct {
	Value    []byte
	Revision uint64
	// Lease is the lease the key is attached to (0 = none): the key is
	// deleted when the lease expires or is revoked.
	Lease uint64
}

// Op is a command kind.
type Op string

// Commands.
const (
	OpPut    Op = "put"
	OpDelete Op = "delete"
	// OpNode publishes a node's HTTP address (the leader publishes its own
	// on election, so followers know where to forward).
	OpNode Op = "node"
	// OpTxn applies Ops if every one of Compares holds.
	OpTxn Op = "txn"
	// OpLeaseGrant creates a lease whose id is the command's index.
	OpLeaseGrant Op = "leaseGrant"
	// OpLeaseRevoke deletes a lease and every key attached to it (the
	// leader proposes it when the lease expires).
	OpLeaseRevoke Op = "leaseRevoke"
)

// command is one Raft log entry's payload.
type command struct {
	Op    Op     `json:"op"`
	Key   string `json:"key,omitempty"` // keyspace + "/" + key
	Value []byte `json:"value,omitempty"`
	// IfRevision, when set, makes the command conditional on the key's
	// current revision (0 = the key must not exist).
	IfRevision *uint64 `json:"ifRevision,omitempty"`
	NodeID     string  `json:"nodeId,omitempty"`
	HTTPAddr   string  `json:"httpAddr,omitempty"`
	// Lease attaches a put key to a lease; LeaseID names the lease to
	// revoke; TTLSeconds is a granted lease's TTL.
	Lease      uint64    `json:"lease,omitempty"`
	LeaseID    uint64    `json:"leaseId,omitempty"`
	TTLSeconds int64     `json:"ttlSeconds,omitempty"`
	Compares   []Compare `json:"compares,omitempty"`
	Ops        []TxnOp   `json:"ops,omitempty"`
}

// applyResult is what FSM.Apply returns through the ApplyFuture.
type applyResult struct {
	Entry Entry // after the command (Revision 0: absent)
	// Revision is the index the command was applied at.
	Revision uint64
	Err      error
}

// fsm is the replicated state machine: keys → entries, plus the HTTP
// address of every node that has led. Apply runs on Raft's FSM goroutine;
// reads take the read lock and may run concurrently with it.
type fsm struct {
	mu     sync.RWMutex
	kv     map[string]Entry
	nodes  map[string]string // node id → HTTP address
	leases map[uint64]*lease
	// events is the recent change history, for watches: complete from
	// revision firstRev on. changed is closed (and replaced) whenever
	// events are added or the state is restored.
	events   []Event
	firstRev uint64
	changed  chan struct{}
	dirty    bool
	applied  uint64 // index of the last command applied
	// appliedCh is closed (and replaced) when applied moves while a
	// reader waits for it (waitApplied sets appliedWait).
	appliedCh   chan struct{}
	appliedWait bool
	// onRestore is a test signal fired after a snapshot is restored.
	onRestore func()
}

var _ raft.FSM = (*fsm)(nil)

func newFSM() *fsm {
	return &fsm{kv: map[string]Entry{}, nodes: map[string]string{}, leases: map[uint64]*lease{}, firstRev: 1, changed: make(chan struct{}), appliedCh: make(chan struct{})}
}

// lease is a granted lease: its TTL and the keys attached to it. Expiry is
// not decided here (the FSM has no clock): the leader tracks deadlines and
// proposes OpLeaseRevoke.
type lease struct {
	ttlSeconds int64
	keys       map[string]struct{}
}

// set writes key, moving its lease attachment; f.mu must be held.
func (f *fsm) set(key string, e Entry) {
	f.detach(key)
	if l := f.leases[e.Lease]; l != nil {
		l.keys[key] = struct{}{}
	}
	f.kv[key] = e
	f.record(Event{Revision: e.Revision, Type: OpPut, Key: key, Value: e.Value})
}

// del deletes key at revision rev; f.mu must be held.
func (f *fsm) del(key string, rev uint64) {
	f.detach(key)
	delete(f.kv, key)
	f.record(Event{Revision: rev, Type: OpDelete, Key: key})
}

func (f *fsm) detach(key string) {
	if old := f.kv[key]; old.Lease != 0 {
		if l := f.leases[old.Lease]; l != nil {
			delete(l.keys, key)
		}
	}
}

func (f *fsm) Apply(l *raft.Log) any {
	var c command
	err := json.Unmarshal(l.Data, &c)
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.notify()
	f.applied = l.Index
	if err != nil {
		// Every node decodes the same bytes the same way, so skipping a
		// bad entry keeps replicas identical.
		return applyResult{Revision: l.Index, Err: fmt.Errorf("cp: bad command at %d: %w", l.Index, err)}
	}
	cur := f.kv[c.Key]
	switch c.Op {
	case OpNode:
		f.nodes[c.NodeID] = c.HTTPAddr
		return applyResult{Revision: l.Index}
	case OpTxn:
		return f.applyTxn(c, l.Index)
	case OpLeaseGrant:
		f.leases[l.Index] = &lease{ttlSeconds: c.TTLSeconds, keys: map[string]struct{}{}}
		return applyResult{Revision: l.Index}
	case OpLeaseRevoke:
		ls := f.leases[c.LeaseID]
		if ls == nil {
			return applyResult{Revision: l.Index, Err: ErrLeaseNotFound}
		}
		for k := range ls.keys {
			f.del(k, l.Index)
		}
		delete(f.leases, c.LeaseID)
		return applyResult{Revision: l.Index}
	case OpPut, OpDelete:
		if c.IfRevision != nil && *c.IfRevision != cur.Revision {
			return applyResult{Entry: cur, Revision: l.Index, Err: &ConflictError{Expected: *c.IfRevision, Current: cur.Revision}}
		}
		if c.Op == OpDelete {
			if cur.Revision == 0 {
				return applyResult{Revision: l.Index, Err: ErrNotFound}
			}
			f.del(c.Key, l.Index)
			return applyResult{Revision: l.Index}
		}
		if c.Lease != 0 && f.leases[c.Lease] == nil {
			return applyResult{Entry: cur, Revision: l.Index, Err: ErrLeaseNotFound}
		}
		e := Entry{Value: c.Value, Revision: l.Index, Lease: c.Lease}
		f.set(c.Key, e)
		return applyResult{Entry: e, Revision: l.Index}
	}
	return applyResult{Revision: l.Index, Err: fmt.Errorf("cp: unknown op %q at %d", c.Op, l.Index)}
}

func (f *fsm) get(key string) Entry {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.kv[key]
}

// leaseTTLs lists every lease and its TTL.
func (f *fsm) leaseTTLs() map[uint64]int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[uint64]int64, len(f.leases))
	for id, l := range f.leases {
		out[id] = l.ttlSeconds
	}
	return out
}

func (f *fsm) revision() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.applied
}

// waitApplied waits until the command at index (or a later one) has been
// applied, or ctx ends.
func (f *fsm) waitApplied(ctx context.Context, index uint64) error {
	for {
		f.mu.Lock()
		if f.applied >= index {
			f.mu.Unlock()
			return nil
		}
		ch := f.appliedCh
		f.appliedWait = true
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (f *fsm) nodeHTTP(id string) string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.nodes[id]
}

// snapshotState is the serialized form: a header line, then one JSON line
// per key, so restoring does not need the whole snapshot in one buffer.
type snapshotState struct {
	Applied uint64            `json:"applied"`
	Nodes   map[string]string `json:"nodes"`
	Keys    int               `json:"keys"`
	// Leases maps lease id → TTL seconds; keys carry their lease.
	Leases map[uint64]int64 `json:"leases,omitempty"`
}

type snapshotKey struct {
	Key      string `json:"k"`
	Value    []byte `json:"v"`
	Revision uint64 `json:"r"`
	Lease    uint64 `json:"l,omitempty"`
}

type fsmSnapshot struct {
	state snapshotState
	kv    map[string]Entry
}

// Snapshot copies the maps (entries are immutable values, so a shallow
// copy is a consistent point-in-time view) and writes them in Persist,
// off the FSM goroutine.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := &fsmSnapshot{state: snapshotState{Applied: f.applied, Nodes: make(map[string]string, len(f.nodes)), Keys: len(f.kv), Leases: map[uint64]int64{}}, kv: make(map[string]Entry, len(f.kv))}
	for id, l := range f.leases {
		s.state.Leases[id] = l.ttlSeconds
	}
	for k, v := range f.nodes {
		s.state.Nodes[k] = v
	}
	for k, v := range f.kv {
		s.kv[k] = v
	}
	return s, nil
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	w := bufio.NewWriter(sink)
	enc := json.NewEncoder(w)
	err := enc.Encode(s.state)
	for k, v := range s.kv {
		if err != nil {
			break
		}
		err = enc.Encode(snapshotKey{Key: k, Value: v.Value, Revision: v.Revision, Lease: v.Lease})
	}
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("cp: persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}

// Restore replaces the state with a snapshot's.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	dec := json.NewDecoder(bufio.NewReader(rc))
	var st snapshotState
	if err := dec.Decode(&st); err != nil {
		return fmt.Errorf("cp: restore snapshot header: %w", err)
	}
	kv := make(map[string]Entry, st.Keys)
	leases := make(map[uint64]*lease, len(st.Leases))
	for id, ttl := range st.Leases {
		leases[id] = &lease{ttlSeconds: ttl, keys: map[string]struct{}{}}
	}
	for i := 0; i < st.Keys; i++ {
		var k snapshotKey
		if err := dec.Decode(&k); err != nil {
			return fmt.Errorf("cp: restore snapshot key %d of %d: %w", i, st.Keys, err)
		}
		kv[k.Key] = Entry{Value: k.Value, Revision: k.Revision, Lease: k.Lease}
		if l := leases[k.Lease]; l != nil {
			l.keys[k.Key] = struct{}{}
		}
	}
	if st.Nodes == nil {
		st.Nodes = map[string]string{}
	}
	f.mu.Lock()
	f.kv, f.nodes, f.applied, f.leases = kv, st.Nodes, st.Applied, leases
	// The history before the snapshot is gone.
	f.events, f.firstRev, f.dirty = nil, st.Applied+1, true
	f.notify()
	f.mu.Unlock()
	if f.onRestore != nil {
		f.onRestore()
	}
	return nil
}
