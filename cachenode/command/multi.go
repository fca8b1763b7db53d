package command

import (
	"errors"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/keyspace"
	"github.com/portico-io/portico/cachenode/namespace"
	"github.com/portico-io/portico/cachenode/resp"
)

// MULTI, EXEC, DISCARD, WATCH and UNWATCH with Redis's semantics: in MULTI
// every command but EXEC, DISCARD, MULTI, WATCH and QUIT is checked as it
// arrives (unknown, arity, auth, cluster routing, rate limit) and queued;
// a refusal flags the transaction, and EXEC then answers EXECABORT. EXEC
// runs the queue as one batch (batch.go): in cluster mode every key of
// the queue must be in one slot (CROSSSLOT, MOVED and ASK as Redis Cluster
// answers them for EXEC, which then discards the transaction). A WATCHed
// key changed by anyone before EXEC — a command, expiry, eviction, a flush
// — makes EXEC answer a null array and run nothing (keyspace.Watcher).

const (
	errExecAbort   = "EXECABORT Transaction discarded because of previous errors."
	errExecNoMulti = "ERR EXEC without MULTI"
	errDiscardNo   = "ERR DISCARD without MULTI"
	errNestedMulti = "ERR MULTI calls can not be nested"
	errWatchMulti  = "ERR WATCH inside MULTI is not allowed"
)

func init() {
	const txf = flagLoading | flagStale | flagFast
	reg("multi", 1, txf, 0, 0, 0, "transactions", "1.2.0", nil, "Starts a transaction.", cmdMulti)
	// EXEC checks its own arity: a refused EXEC answers EXECABORT (Redis's
	// execCommandAbort), in MULTI or not.
	reg("exec", -1, flagLoading|flagStale, 0, 0, 0, "transactions", "1.2.0", nil, "Executes all commands in a transaction.", cmdExec)
	reg("discard", 1, txf, 0, 0, 0, "transactions", "2.0.0", nil, "Discards a transaction.", cmdDiscard)
	reg("watch", -2, txf, 1, -1, 1, "transactions", "2.2.0", ksRO, "Monitors changes to keys to determine the execution of a transaction.", cmdWatch)
	reg("unwatch", 1, txf, 0, 0, 0, "transactions", "2.2.0", nil, "Forgets about watched keys of a transaction.", cmdUnwatch)
	for _, n := range []string{"multi", "exec", "discard", "watch", "unwatch"} {
		table[n].limited = false
	}
}

// txnState is a connection's transaction: the MULTI queue and the WATCHes.
type txnState struct {
	multi  bool
	dirty  bool // a command was refused while queuing
	asking bool // ASKING preceded MULTI: EXEC routes as asked
	queue  []queued
	// watcher is shared by every key this connection watches.
	watcher *keyspace.Watcher
	watched []watchedKey
}

type queued struct {
	spec *Spec
	args [][]byte // owned copies
}

type watchedKey struct {
	ns  *namespace.Namespace
	key []byte
}

func (s *Session) txnState() *txnState {
	if s.txn == nil {
		s.txn = &txnState{}
	}
	return s.txn
}

// queue handles a command that arrived in MULTI: it reports false for the
// commands that run at once (EXEC, DISCARD, MULTI, WATCH, QUIT), else
// queues it or refuses it (flagging the transaction) and reports true.
func (e *Engine) queue(s *Session, args [][]byte, w *resp.Writer, nowMs int64) bool {
	st := s.txn
	spec := lookup(args[0])
	if spec == nil {
		st.dirty = true
		w.Error(unknownCommand(args))
		return true
	}
	switch spec.Name {
	case "exec", "discard", "multi", "watch", "quit", "reset":
		return false
	}
	refuse := func(msg string) bool {
		st.dirty = true
		w.Error(msg)
		return true
	}
	if (spec.Arity > 0 && len(args) != spec.Arity) || (spec.Arity < 0 && len(args) < -spec.Arity) {
		return refuse("ERR wrong number of arguments for '" + spec.Name + "' command")
	}
	if !s.Authed && !spec.has(flagNoAuth) && e.authRequired(s) {
		return refuse(errNoAuth)
	}
	if e.cfg.Loading != nil && e.cfg.Loading.Load() && !spec.has(flagLoading) {
		return refuse(errLoading)
	}
	ns := s.NS
	if ns.Removed() {
		return refuse("ERR namespace '" + ns.Name + "' no longer exists; AUTH into another one")
	}
	if e.scripts.busy.Load() != 0 && e.busyFor(ns, spec, args) {
		return refuse(errBusyScript)
	}
	keys := spec.keys(args, nil)
	if e.cfg.Cluster != nil && len(keys) > 0 {
		q := cluster.Query{Asking: st.asking, ReadOnly: s.ReadOnly, Write: spec.has(flagWrite)}
		if redirect, _ := e.cfg.Cluster.Load().Route(keys, q); redirect != "" {
			return refuse(redirect)
		}
	}
	if spec.limited {
		n := 0
		for _, a := range args {
			n += len(a)
		}
		if err := ns.Admit(n, nowMs); err != nil {
			what := "ops"
			if errors.Is(err, namespace.ErrRateBytes) {
				what = "bandwidth"
			}
			return refuse("ERR namespace '" + ns.Name + "' " + what + " rate limited")
		}
	}
	own := make([][]byte, len(args))
	for i, a := range args {
		own[i] = append([]byte(nil), a...)
	}
	st.queue = append(st.queue, queued{spec: spec, args: own})
	w.Simple("QUEUED")
	return true
}

func cmdMulti(c *Ctx) {
	st := c.S.txnState()
	if st.multi {
		c.W.Error(errNestedMulti)
		return
	}
	st.multi, st.dirty, st.asking, st.queue = true, false, c.asking, nil
	c.W.OK()
}

func cmdDiscard(c *Ctx) {
	if st := c.S.txn; st == nil || !st.multi {
		c.W.Error(errDiscardNo)
		return
	}
	c.e.discardTxn(c.S)
	c.W.OK()
}

func cmdUnwatch(c *Ctx) {
	if st := c.S.txn; st != nil && !st.multi {
		c.e.discardTxn(c.S)
	}
	c.W.OK()
}

// cmdWatch registers the keys under their shard locks (held by Exec for
// the command): a key past its deadline is expired first.
func cmdWatch(c *Ctx) {
	st := c.S.txnState()
	if st.multi {
		c.W.Error(errWatchMulti)
		return
	}
	if st.watcher == nil {
		st.watcher = &keyspace.Watcher{}
	}
next:
	for _, k := range c.Args[1:] {
		for _, wk := range st.watched {
			if wk.ns == c.NS && string(wk.key) == string(k) {
				continue next
			}
		}
		c.Tx.Peek(k)
		c.Tx.Watch(k, st.watcher)
		st.watched = append(st.watched, watchedKey{ns: c.NS, key: append([]byte(nil), k...)})
	}
	c.W.OK()
}

// discardTxn ends s's MULTI and forgets its WATCHes. It takes shard locks:
// the caller holds none.
func (e *Engine) discardTxn(s *Session) {
	st := s.txn
	if st == nil {
		return
	}
	for _, wk := range st.watched {
		wk.ns.DB.Unwatch(wk.key, st.watcher)
	}
	s.txn = nil
}

// cmdExec runs the queue as one batch.
func cmdExec(c *Ctx) {
	e, s, w := c.e, c.S, c.W
	st := s.txn
	if len(c.Args) != 1 {
		if st != nil && st.multi {
			e.discardTxn(s)
		}
		w.Error("EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command")
		return
	}
	if st == nil || !st.multi {
		w.Error(errExecNoMulti)
		return
	}
	if st.dirty {
		e.discardTxn(s)
		w.Error(errExecAbort)
		return
	}
	b := e.newBatch(s, c.Tx.Now())
	var keys [][]byte // every queued command's keys
	write, denyOOM := false, false
	for _, q := range st.queue {
		keys = q.spec.keys(q.args, keys)
		write = write || q.spec.has(flagWrite)
		denyOOM = denyOOM || q.spec.has(flagDenyOOM)
		if len(q.spec.keys(q.args, nil)) == 0 && (heldSafe[q.spec.Name] || q.spec.Group == "scripting") {
			b.all = true
		}
	}
	if msg := e.execRefusal(s, st, keys, write); msg != "" {
		e.discardTxn(s)
		w.Error(msg)
		return
	}
	if denyOOM && !e.makeRoom(s.NS) {
		s.NS.Counters.OOM.Add(1)
		e.discardTxn(s)
		w.Error(errOOM)
		return
	}
	b.keys, b.routeKeys = keys, keys
	for _, wk := range st.watched {
		if wk.ns == s.NS {
			b.keys = append(b.keys, wk.key)
		}
	}
	if b.m != nil {
		b.all = false // one slot: its shard
	}
	b.begin()
	if msg := b.recheck(keys, st.asking, write); msg != "" {
		b.end()
		e.discardTxn(s)
		w.Error(msg)
		return
	}
	for _, wk := range st.watched {
		if wk.ns == s.NS {
			b.tx.Peek(wk.key) // a watched key past its deadline expires now: a change
		}
	}
	if st.watcher != nil && st.watcher.Dirty() {
		b.end()
		e.discardTxn(s)
		w.NullArray()
		return
	}
	w.Array(len(st.queue))
	for _, q := range st.queue {
		b.run(q.spec, q.args, q.spec.keys(q.args, nil), w)
	}
	b.end()
	e.discardTxn(s)
}

// execRefusal is what EXEC answers instead of running, before it locks:
// a handover hold, and in cluster mode the queue's routing as one command
// (CROSSSLOT, MOVED, CLUSTERDOWN, ASK), a replica or a fenced primary
// refusing writes.
func (e *Engine) execRefusal(s *Session, st *txnState, keys [][]byte, write bool) string {
	if e.cfg.Hold != nil && e.cfg.Hold.Load() && (len(keys) > 0 || write) {
		return errHandingOver
	}
	if e.cfg.Cluster == nil {
		return ""
	}
	m := e.cfg.Cluster.Load()
	q := cluster.Query{Asking: st.asking, ReadOnly: s.ReadOnly, Write: write}
	if len(keys) > 0 {
		if redirect, _ := m.Route(keys, q); redirect != "" {
			return redirect
		}
	} else if write && m.Myself().IsReplica() {
		return errReadOnlyReplica
	}
	if write && e.cfg.WriteFence != nil {
		return e.cfg.WriteFence()
	}
	return ""
}

// recheck routes keys again once the batch holds their locks: the map may
// have changed while it waited, and a migrating slot's answer depends on
// which keys are here, under the locks its mover takes.
func (b *batch) recheck(keys [][]byte, asking, write bool) string {
	if b.m == nil || len(keys) == 0 {
		return ""
	}
	m := b.e.cfg.Cluster.Load()
	b.m = m
	q := cluster.Query{Asking: asking, ReadOnly: b.s.ReadOnly, Write: write}
	redirect, check := m.Route(keys, q)
	if redirect != "" || check < 0 {
		return redirect
	}
	present := 0
	for _, k := range keys {
		if b.tx.Peek(k) != nil {
			present++
		}
	}
	return m.RouteMoving(check, q, present, len(keys)-present)
}
