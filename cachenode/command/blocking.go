package command

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/keyspace"
	"github.com/portico-io/portico/cachenode/namespace"
	"github.com/portico-io/portico/cachenode/resp"
	"github.com/portico-io/portico/cachenode/slots"
)

// Blocking commands (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP; a sorted-set
// BZPOP* plugs in through Ctx.block) follow Redis 7.0's blocked.c:
//
//   - A command that finds data answers at once. Otherwise, under the
//     locks of its keys, it queues a waiter on each key (FIFO per key) and
//     writes no reply: the session is Blocked, and the server waits for
//     the waiter (ArmWait, Unblock) before it runs the connection's next
//     command. Registering under the key locks is what makes a push that
//     races with it either visible to its check or aware of its waiter.
//   - A write that leaves a waited-on key holding data makes the key
//     ready (the declared keys of every write command, plus Ctx.signal
//     for pushes inside EXEC, whose own keys are none). Once the command
//     (or EXEC) has released its locks, and before its reply goes out,
//     its goroutine serves the ready keys: for each, the first waiter in
//     arrival order whose type matches is taken off every queue and served
//     under the locks of the key (and BLMOVE's destination, which may in
//     turn be ready). So every client that saw the push's reply sees the
//     waiter served, and a push of three elements serves three waiters.
//   - A timer ends a waiter at its deadline (null array; timeout 0 never
//     ends); a connection that closes leaves the queues (Engine.Close).
//   - In cluster mode a waiter looks at the slot map every
//     clusterRecheck, as Redis's clientsCron does: when this node became a
//     replica it gets -UNBLOCKED and its connection closes (Redis's
//     disconnectAllBlockedClients on a role change); when its slot moved
//     it gets -MOVED (or -CLUSTERDOWN), as clusterRedirectBlockedClientIfNeeded.
//
// Lock order: shard locks, then blocking.mu, then a waiter's mu.

// clusterRecheck is how often a blocked client in cluster mode looks for
// a new slot map (Redis checks each blocked client from clientsCron,
// every 100 ms for a few clients).
const clusterRecheck = 100 * time.Millisecond

const (
	errTimeoutNotFloat = "ERR timeout is not a float or out of range"
	errTimeoutNegative = "ERR timeout is negative"
	errUnblocked       = "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)"
)

// readyKey is one key of one namespace with blocked clients.
type readyKey struct {
	ns  *namespace.Namespace
	key string
}

// blocking is an Engine's registry of blocked clients.
type blocking struct {
	n      atomic.Int64 // waiters queued: zero keeps the write path to this one load
	mu     sync.Mutex
	queues map[readyKey][]*waiter
}

// serveFunc hands a waiter its data: it runs under the locks of key and of
// the waiter's extra keys, with e key's live entry (of the waiter's kind,
// not empty), and writes the waiter's one reply to c.W. c.S is nil.
type serveFunc func(c *Ctx, key []byte, e *keyspace.Entry)

// waiter is one blocked command.
type waiter struct {
	e     *Engine
	s     *Session
	ns    *namespace.Namespace
	keys  [][]byte // copies, in argument order
	kind  keyspace.Kind
	extra [][]byte // keys the serve writes besides the ready one (BLMOVE's destination)
	serve serveFunc
	proto int
	query cluster.Query
	timer *time.Timer // nil: no timeout
	watch *time.Timer // cluster mode: the map recheck

	queued bool // on the queues; guarded by blocking.mu

	mu        sync.Mutex
	done      bool
	reply     []byte
	closeConn bool
}

// Blocked reports whether the last command left s waiting for a blocking
// command: the server must send the replies before it, wait (ArmWait)
// and then take the command's reply (Unblock) before running more.
func (s *Session) Blocked() bool { return s.block != nil }

// ArmWait runs arm and reports true while the blocked command of s has not
// completed; once it has, it reports false without running arm, and the
// caller takes the reply with Unblock. Session.Wake is called after the
// command completes and never concurrently with arm: a server that arms a
// wake-up (a read deadline) in arm and makes Wake fire it cannot miss a
// completion.
func (e *Engine) ArmWait(s *Session, arm func()) bool {
	w := s.block
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return false
	}
	arm()
	return true
}

// Unblock writes the reply of the completed blocking command of s to out
// and clears the block. After -UNBLOCKED it sets s.Quit: the connection
// closes once the reply is sent, as Redis's does.
func (e *Engine) Unblock(s *Session, out *resp.Writer) {
	w := s.block
	w.mu.Lock()
	reply, closeConn := w.reply, w.closeConn
	w.mu.Unlock()
	s.block = nil
	s.waiting.Store(nil)
	out.Buf = append(out.Buf, reply...)
	if closeConn {
		s.Quit = true
	}
}

// BlockedClients is the number of clients waiting in a blocking command
// (INFO's blocked_clients).
func (e *Engine) BlockedClients() int64 { return e.blk.n.Load() }

// abandon takes the blocked command of s off the queues (its connection
// closed).
func (e *Engine) abandon(s *Session) {
	w := s.block
	s.block = nil
	s.waiting.Store(nil)
	e.blk.claim(w)
}

// claim takes w off every queue; false when it was not on them any more
// (served, timed out or abandoned already).
func (b *blocking) claim(w *waiter) bool {
	b.mu.Lock()
	if !w.queued {
		b.mu.Unlock()
		return false
	}
	w.queued = false
	for _, k := range w.keys {
		rk := readyKey{w.ns, string(k)}
		q := b.queues[rk]
		for i, x := range q {
			if x == w {
				q = append(q[:i], q[i+1:]...)
				break
			}
		}
		if len(q) == 0 {
			delete(b.queues, rk)
		} else {
			b.queues[rk] = q
		}
	}
	b.n.Add(-1)
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.watch != nil {
		w.watch.Stop()
	}
	b.mu.Unlock()
	return true
}

// add queues w and starts its timers (under the lock claim takes, so a
// timer that fires at once finds them set).
func (b *blocking) add(w *waiter, timers func()) {
	b.mu.Lock()
	if b.queues == nil {
		b.queues = map[readyKey][]*waiter{}
	}
	seen := map[string]bool{}
	for _, k := range w.keys {
		if seen[string(k)] { // BLPOP k k: queued once
			continue
		}
		seen[string(k)] = true
		rk := readyKey{w.ns, string(k)}
		b.queues[rk] = append(b.queues[rk], w)
	}
	w.queued = true
	b.n.Add(1)
	timers()
	b.mu.Unlock()
}

// first returns the longest-waiting client on rk whose kind is kind (any
// kind when kind < 0), or nil.
func (b *blocking) first(rk readyKey, kind int) *waiter {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.queues[rk] {
		if kind < 0 || int(w.kind) == kind {
			return w
		}
	}
	return nil
}

// readyKeys appends the keys among keys that have blocked clients.
func (b *blocking) readyKeys(ns *namespace.Namespace, keys [][]byte, out []readyKey) []readyKey {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range keys {
		rk := readyKey{ns, string(k)}
		if _, ok := b.queues[rk]; ok {
			out = append(out, rk)
		}
	}
	return out
}

// signal marks key ready if clients wait on it: what a handler that
// pushes calls, so pushes inside EXEC (whose own keys are none) wake them
// once EXEC is done. Outside EXEC the declared keys are checked anyway.
func (c *Ctx) signal(key []byte) {
	if c.S != nil && c.e.blk.n.Load() > 0 {
		c.S.ready = c.e.blk.readyKeys(c.NS, [][]byte{key}, c.S.ready)
	}
}

// complete ends w with reply and wakes its connection.
func (w *waiter) complete(reply []byte, closeConn bool) {
	w.mu.Lock()
	w.done, w.reply, w.closeConn = true, reply, closeConn
	if w.s.Wake != nil {
		w.s.Wake()
	}
	w.mu.Unlock()
}

// nullReply is the reply of a blocking command that timed out: a null
// array, also for BLMOVE (Redis's replyToBlockedClientTimedOut).
func nullReply(proto int) []byte {
	w := resp.Writer{Proto: proto}
	w.NullArray()
	return w.Buf
}

func errorReply(msg string) []byte {
	var w resp.Writer
	w.Error(msg)
	return w.Buf
}

// serveReady serves the clients blocked on the keys the session's last
// command made ready, in arrival order per key. Its locks are released.
func (e *Engine) serveReady(s *Session, nowMs int64) {
	s.ready = e.serveQueue(s.ready, nowMs)
}

// KeyStored serves the clients blocked on key of namespace ns after a
// write that did not run through Exec: a record of the replication
// stream, a key a slot import brought. Redis serves blocked clients after
// every command, its master's and a migration's RESTORE included
// (handleClientsBlockedOnKeys); without this a client blocked on a key
// such a write filled would wait out its timeout with the data there. It
// serves in the caller's goroutine, which must hold no shard lock; with no
// blocked client it is one atomic load.
func (e *Engine) KeyStored(ns string, key []byte) {
	if e.blk.n.Load() == 0 {
		return
	}
	n, err := e.cfg.Registry.Get(ns)
	if err != nil {
		return
	}
	if ready := e.blk.readyKeys(n, [][]byte{key}, nil); len(ready) > 0 {
		e.serveQueue(ready, e.cfg.Now().UnixMilli())
	}
}

// serveQueue serves the waiters of the keys in queue (and of the keys
// their serves push to), in arrival order per key, and returns queue
// emptied for reuse.
func (e *Engine) serveQueue(queue []readyKey, nowMs int64) []readyKey {
	for i := 0; i < len(queue); i++ {
		dup := false
		for _, p := range queue[:i] {
			if p == queue[i] {
				dup = true
				break
			}
		}
		if !dup {
			queue = e.serveKey(queue[i], nowMs, queue)
		}
	}
	clear(queue)
	return queue[:0]
}

// serveKey serves rk's waiters while it holds data for them, appending the
// keys the serves pushed to (BLMOVE) to queue.
func (e *Engine) serveKey(rk readyKey, nowMs int64, queue []readyKey) []readyKey {
	key := []byte(rk.key)
	db := e.keyspace(rk.ns)
	var want *waiter // a waiter of the key's kind, behind one of another kind
	for {
		w := want
		if w == nil {
			if w = e.blk.first(rk, -1); w == nil {
				return queue
			}
		}
		want = nil
		var tx keyspace.Txn
		db.BeginAt(&tx, append([][]byte{key}, w.extra...), nowMs)
		ent := tx.Peek(key)
		if ent == nil || ent.Obj == nil || ent.Obj.Len() == 0 {
			tx.End()
			return queue
		}
		if ent.Kind() != w.kind {
			tx.End()
			if want = e.blk.first(rk, int(ent.Kind())); want == nil {
				return queue
			}
			continue
		}
		if !e.blk.claim(w) {
			tx.End()
			continue
		}
		c := Ctx{e: e, W: &resp.Writer{Proto: w.proto}, NS: rk.ns, Tx: &tx}
		w.serve(&c, key, ent)
		tx.End()
		w.complete(c.W.Buf, false)
		for _, x := range w.extra {
			queue = append(queue, readyKey{rk.ns, string(x)})
		}
	}
}

// canBlock reports whether this command may block (not inside EXEC or a
// script, and on a connection whose server waits).
func (c *Ctx) canBlock() bool { return c.S != nil && c.S.CanBlock && !c.DenyBlocking() }

// block makes the session wait on keys (in argument order) for data of
// kind: serve hands it over once a push makes one of them ready, timeout
// (0 = forever) ends it with a null array. extra are the keys serve also
// writes (they must be in the same slot, which routing checked). It runs
// in the handler, under the locks of keys, which must hold no data of
// kind (the handler looked). It writes no reply.
func (c *Ctx) block(keys [][]byte, kind keyspace.Kind, timeout time.Duration, extra [][]byte, serve serveFunc) {
	w := &waiter{e: c.e, s: c.S, ns: c.NS, kind: kind, serve: serve, proto: c.S.Proto,
		query: cluster.Query{ReadOnly: c.S.ReadOnly, Write: c.spec.has(flagWrite)}}
	for _, k := range keys {
		w.keys = append(w.keys, append([]byte(nil), k...))
	}
	for _, k := range extra {
		w.extra = append(w.extra, append([]byte(nil), k...))
	}
	c.S.block = w
	c.S.waiting.Store(w)
	c.e.blk.add(w, func() {
		if timeout > 0 {
			w.timer = time.AfterFunc(timeout, func() {
				if c.e.blk.claim(w) {
					w.complete(nullReply(w.proto), false)
				}
			})
		}
		if c.e.cfg.Cluster != nil {
			w.watch = time.AfterFunc(clusterRecheck, w.recheck)
		}
	})
}

// recheck ends w when the slot map no longer lets it wait here: -UNBLOCKED
// (and the connection closes) when this node became a replica, the
// redirect when its slot moved or the cluster is down.
func (w *waiter) recheck() {
	m := w.e.cfg.Cluster.Load()
	reply, closeConn := "", false
	if m.Myself().IsReplica() {
		reply, closeConn = errUnblocked, true
	} else if r, _ := m.Route(w.keys, w.query); strings.HasPrefix(r, "MOVED") || strings.HasPrefix(r, "CLUSTERDOWN") {
		// A slot importing into this node keeps its waiters (they came
		// with ASKING), as Redis's importing_slots_from check does.
		if mg := m.Migration(slots.Of(w.keys[0])); mg == nil || mg.To != m.Self || strings.HasPrefix(r, "CLUSTERDOWN") {
			reply = r
		}
	}
	if reply == "" {
		b := &w.e.blk
		b.mu.Lock()
		if w.queued {
			w.watch.Reset(clusterRecheck)
		}
		b.mu.Unlock()
		return
	}
	if w.e.blk.claim(w) {
		w.complete(errorReply(reply), closeConn)
	}
}

// blockTimeout parses a blocking command's timeout in seconds as Redis 7.0
// 7.0.15 does: a float, rounded up to whole milliseconds (0.0001 times
// out after 1 ms, measured against redis-server; only what rounds to 0
// blocks forever), 0 = forever, negative refused. A value too large to be a
// count of milliseconds wraps negative in Redis's C conversion, so it is
// refused as negative; one that is not (but ends past the clock's end)
// waits forever, as there.
func (c *Ctx) blockTimeout(arg []byte) (time.Duration, bool) {
	f, ok := parseTimeoutFloat(arg)
	if !ok {
		c.W.Error(errTimeoutNotFloat)
		return 0, false
	}
	ms := math.Ceil(f * 1000)
	if ms >= math.MaxInt64 || ms <= math.MinInt64 || ms != ms {
		c.W.Error(errTimeoutNegative)
		return 0, false
	}
	n := int64(ms)
	if n < 0 {
		c.W.Error(errTimeoutNegative)
		return 0, false
	}
	if n > math.MaxInt64/int64(time.Millisecond) {
		return 0, true // longer than a Duration holds: forever
	}
	return time.Duration(n) * time.Millisecond, true
}

// parseTimeoutFloat is Redis's string2ld: a whole-argument float, no
// spaces, no NaN; "inf" parses (and is then out of range), as do
// strtold's hexadecimal forms ("0x10").
func parseTimeoutFloat(b []byte) (float64, bool) {
	if f, ok := parseFloat(b); ok {
		return f, true
	}
	s := string(b)
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg, s = s[0] == '-', s[1:]
	}
	if len(s) > 2 && (s[:2] == "0x" || s[:2] == "0X") && !strings.ContainsAny(s, "pP") {
		if f, ok := parseFloat([]byte("0x" + s[2:] + "p0")); ok {
			if neg {
				f = -f
			}
			return f, true
		}
	}
	return 0, false
}
