package command

import (
	"time"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/keyspace"
	"github.com/portico-io/portico/cachenode/namespace"
	"github.com/portico-io/portico/cachenode/resp"
)

// A batch runs many commands of one connection as one: EXEC's queued
// commands, a script's redis.call()s. It holds one keyspace.Txn across
// them, so no other connection's command on the same keys runs in
// between, expiry and eviction wait, a migrating slot's mover waits, and
// the changed keys reach the replication feed together in End (each key's
// final state, while the locks are still held).
//
// Which shards it holds: standalone, every shard of the namespace when a
// command may touch any key (a script, whose keys need not be declared;
// SCAN, KEYS, DBSIZE, FLUSHDB in a transaction), else the shards of the
// keys; in cluster mode the shard of the batch's one slot. Whole-keyspace
// commands then run on the held locks (heldKeyspace). A command the batch
// cannot run on its locks — a keyless command it does not know, one in
// cluster mode that needs every shard, anything after AUTH switched the
// namespace — runs alone: the batch lets its locks go, the command locks
// what it needs, and the batch takes its locks again, so that one command
// is not atomic with the rest (documented in the README).
type batch struct {
	e  *Engine
	s  *Session
	ns *namespace.Namespace
	// tx is own, or the Txn Exec locked a script's declared keys into
	// (cluster mode), which the batch then carries on with.
	tx    *keyspace.Txn
	own   keyspace.Txn
	nowMs int64
	all   bool     // lock every shard
	keys  [][]byte // the keys whose shards are locked (when !all)
	// routeKeys are the keys the batch was routed for (cluster mode).
	routeKeys [][]byte
	m         *cluster.Map
	// broken, once set, is every later command's reply: the map changed
	// while the batch ran a command alone and the keys are no longer here.
	broken string
	// oom: the namespace was over its quota when the batch started; a
	// denyoom command gets -OOM (scripts; EXEC checks before it starts).
	oom bool
	// readOnly: EVAL_RO/EVALSHA_RO; writes are refused.
	readOnly bool
	// script is set while a script runs in this batch (script.go).
	script *running
	wrote  bool // a write command ran
	locked bool
}

// zeroTime: a command in a batch has no latency sample of its own.
var zeroTime time.Time

// heldSafe: keyless commands that run on the batch's locks when it holds
// every shard (their Scan/Flush go through heldKeyspace).
var heldSafe = map[string]bool{"scan": true, "keys": true, "dbsize": true, "flushdb": true, "flushall": true}

// lockFree: keyless commands that touch no key and take no lock, so they
// run as they are inside a batch.
var lockFree = map[string]bool{"ping": true, "echo": true, "time": true, "select": true, "client": true, "info": true,
	"config": true, "command": true, "readonly": true, "readwrite": true, "asking": true, "quit": true}

func (e *Engine) newBatch(s *Session, nowMs int64) *batch {
	b := &batch{e: e, s: s, ns: s.NS, nowMs: nowMs}
	b.tx = &b.own
	if e.cfg.Cluster != nil {
		b.m = e.cfg.Cluster.Load()
	}
	return b
}

// begin takes the batch's locks.
func (b *batch) begin() {
	ks := b.e.keyspace(b.ns)
	if b.all && b.e.cfg.Cluster == nil {
		if a, ok := ks.(interface{ BeginAll(*keyspace.Txn, int64) }); ok {
			a.BeginAll(b.tx, b.nowMs)
			b.locked = true
			return
		}
	}
	ks.BeginAt(b.tx, b.keys, b.nowMs)
	b.locked = true
}

// end releases the batch's locks, reporting its changes.
func (b *batch) end() {
	if b.locked {
		b.tx.End()
		b.locked = false
	}
}

// holds reports whether the batch's locks cover keys.
func (b *batch) holds(keys [][]byte) bool {
	if !b.locked {
		return false
	}
	if b.tx.HoldsAll() {
		return true
	}
	for _, k := range keys {
		if !b.tx.Holds(k) {
			return false
		}
	}
	return true
}

// run executes one command in the batch, appending its one reply to w.
// keys are spec's keys in args.
func (b *batch) run(spec *Spec, args, keys [][]byte, w *resp.Writer) {
	if b.broken != "" {
		w.Error(b.broken)
		return
	}
	if spec.has(flagWrite) {
		if b.readOnly {
			w.Error(errROScriptWrite)
			return
		}
		if b.oom && spec.has(flagDenyOOM) {
			w.Error(errOOM)
			return
		}
		if b.m != nil {
			if b.m.Myself().IsReplica() {
				w.Error(errReadOnlyReplica)
				return
			}
			if f := b.e.cfg.WriteFence; f != nil {
				if msg := f(); msg != "" {
					w.Error(msg)
					return
				}
			}
		}
	}
	name := spec.Name
	switch {
	case b.s.NS != b.ns:
		b.alone(spec, args, keys, w) // AUTH or HELLO switched the namespace
	case len(keys) > 0 && b.holds(keys):
		b.held(spec, args, keys, w)
	case len(keys) == 0 && lockFree[name]:
		b.held(spec, args, keys, w)
	case len(keys) == 0 && heldSafe[name] && b.locked && b.tx.HoldsAll():
		b.held(spec, args, keys, w)
	default:
		b.alone(spec, args, keys, w)
	}
	if spec.has(flagWrite) {
		b.wrote = true
	}
}

// held runs a command on the batch's locks.
func (b *batch) held(spec *Spec, args, keys [][]byte, w *resp.Writer) {
	ns := b.ns
	c := &Ctx{e: b.e, Args: args, W: w, S: b.s, NS: ns, spec: spec, Tx: b.tx, batch: b}
	before := len(w.Buf)
	b.count(ns, keys)
	spec.fn(c)
	b.e.observe(ns, nil, spec, zeroTime, len(w.Buf) > before && w.Buf[before] == '-')
}

// alone runs a command on its own locks, between the batch's.
func (b *batch) alone(spec *Spec, args, keys [][]byte, w *resp.Writer) {
	relock := b.locked
	b.end()
	ns := b.s.NS
	var tx keyspace.Txn
	c := &Ctx{e: b.e, Args: args, W: w, S: b.s, NS: ns, spec: spec, Tx: &tx, batch: b}
	before := len(w.Buf)
	b.count(ns, keys)
	b.e.keyspace(ns).BeginAt(&tx, keys, b.nowMs)
	spec.fn(c)
	tx.End()
	b.e.observe(ns, nil, spec, zeroTime, len(w.Buf) > before && w.Buf[before] == '-')
	if relock && b.s.NS == b.ns {
		b.begin()
		if b.m != nil && len(b.routeKeys) > 0 {
			if cur := b.e.cfg.Cluster.Load(); cur != b.m {
				b.m = cur
				q := cluster.Query{Asking: true, ReadOnly: b.s.ReadOnly, Write: true}
				if redirect, _ := cur.Route(b.routeKeys, q); redirect != "" {
					b.broken = redirect
				}
			}
		}
	}
}

// count does a command's per-namespace accounting (rate limits were
// charged when the command arrived: queued, or the script's call).
func (b *batch) count(ns *namespace.Namespace, keys [][]byte) {
	ns.Counters.Ops.Add(1)
	for _, k := range keys {
		ns.Hot.Observe(k)
	}
	if len(keys) > 0 {
		if pc := ns.Prefix(keys[0]); pc != nil {
			pc.Ops.Add(1)
		}
	}
}

// DenyBlocking reports that the command runs inside EXEC or a script: a
// blocking command MUST NOT wait then, and answers as if its timeout had
// passed (Redis's CLIENT_DENY_BLOCKING).
func (c *Ctx) DenyBlocking() bool { return c.batch != nil }

// heldKeyspace serves the whole-keyspace operations of a batch holding
// every shard on its locks.
type heldKeyspace struct {
	Keyspace
	tx *keyspace.Txn
}

func (h heldKeyspace) Scan(cursor uint64, count int, fn func(key string, e *keyspace.Entry)) uint64 {
	return h.tx.ScanHeld(cursor, count, fn)
}

func (h heldKeyspace) ScanSlot(slot int, fn func(key string, e *keyspace.Entry)) {
	h.tx.ScanSlotHeld(slot, fn)
}

func (h heldKeyspace) Flush() { h.tx.FlushHeld() }
