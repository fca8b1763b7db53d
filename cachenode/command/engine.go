// Package command is the command layer of a cache node: the command table
// (names, arity, flags, key specs, as COMMAND reports them), the handlers
// with Redis semantics and error strings, and Engine.Exec, which runs one
// command for one connection: authentication, namespace rate limits,
// eviction before writes, shard locking of the declared keys, counters.
//
// Exec writes exactly one reply per command into a resp.Writer and never
// does network I/O, so it is what the server calls per pipelined command and
// what the fuzz test drives directly.
package command

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/keyspace"
	"github.com/portico-io/portico/cachenode/namespace"
	"github.com/portico-io/portico/cachenode/resp"
	"github.com/portico-io/portico/cachenode/samples"
	"github.com/portico-io/portico/cachenode/script"
)

// DefaultEvictionSamples is how many keys each eviction step samples
// (Redis's maxmemory-samples).
const DefaultEvictionSamples = 5

// maxEvictionsPerCommand bounds the work one write does to make room; past
// it the write is refused with OOM instead of stalling the connection.
const maxEvictionsPerCommand = 4096

// Keyspace is the store commands run against: a namespace's *keyspace.DB,
// or a wrapper around it (Config.Keyspace), e.g. a cluster node that tracks
// keys per slot.
type Keyspace interface {
	// BeginAt locks the shards of keys into tx; tx.End releases them.
	BeginAt(tx *keyspace.Txn, keys [][]byte, nowMs int64)
	Scan(cursor uint64, count int, fn func(key string, e *keyspace.Entry)) uint64
	// ScanSlot visits the live keys of one hash slot (CLUSTER
	// COUNTKEYSINSLOT/GETKEYSINSLOT).
	ScanSlot(slot int, fn func(key string, e *keyspace.Entry))
	NumShards() int
	Len() int64
	Flush()
}

var _ Keyspace = (*keyspace.DB)(nil)

// Config configures an Engine. Registry is required.
type Config struct {
	Registry *namespace.Registry
	// MaxMemory is the node-wide limit in bytes (0 = none). Over it, a write
	// evicts from its own namespace (or gets OOM under noeviction).
	MaxMemory int64
	// RequireAuth refuses commands before AUTH; otherwise connections start
	// in namespace "default".
	RequireAuth bool
	// EvictionSamples is the number of keys sampled per eviction.
	EvictionSamples int
	NodeID          string
	// Port is reported by INFO.
	Port int
	// Clients returns the number of connected clients for INFO.
	Clients func() int
	// Observe, when set, is called after every command (metrics). d is the
	// command's duration, or negative when this command's latency was not
	// sampled.
	Observe func(ns *namespace.Namespace, cmd string, d time.Duration, err bool)
	// Keyspace, when set, returns the store a namespace's commands run
	// against (default: the namespace's own DB).
	Keyspace func(ns *namespace.Namespace) Keyspace
	// Route, when set, sees the keys of every keyed command before it runs;
	// a non-empty answer is sent as the error reply instead (a slot-owning
	// node answers "MOVED <slot> <addr>" or "CROSSSLOT ..." here).
	Route func(keys [][]byte) string
	// Cluster, when set, puts the node in cluster mode: keyed commands for
	// slots it does not own get MOVED (CROSSSLOT, CLUSTERDOWN), and CLUSTER,
	// READONLY, READWRITE and ASKING are served from the current slot map.
	Cluster *cluster.State
	// WriteFence, when set, is asked before every write in cluster mode: a
	// non-empty answer (an error reply without '-') refuses the write. A
	// primary that lost contact with the topology store longer than its
	// lease answers so, so it stops taking writes before a failover can
	// promote its replica.
	WriteFence func() string
	// Replication, when set, reports this node's replication offset and
	// whether it is loading a full sync (CLUSTER SHARDS).
	Replication func() (offset int64, loading bool)
	// ReplicationInfo, when set, is INFO replication's fields
	// ("name:value\r\n" lines); default: a primary without replicas.
	ReplicationInfo func() string
	// Hold, when set and true, answers every keyed command (and every
	// write) with -CLUSTERDOWN …handing its slots over: a primary handing
	// over holds clients (go-redis retries CLUSTERDOWN with backoff) until
	// the replica it promoted serves, instead of bouncing them with MOVED
	// between itself and a replica still on the old map.
	Hold *atomic.Bool
	// Loading, when set and true, answers -LOADING to every command not
	// flagged loading (a replica applying a full sync holds partial data).
	Loading *atomic.Bool
	// Samples, when set, is the node's recent sampled key accesses (CACHE
	// SAMPLES).
	Samples *samples.Ring
	// Moves, when set, lists the slots this node migrates out (CACHE
	// MIGRATIONS).
	Moves func() []cluster.MoveStatus
	// Now is the wall clock (default time.Now). When set, it is also what
	// TTLs and rate limits see (it must then match the Registry's clock).
	Now func() time.Time
	// ScriptTimeLimit is how long a Lua script runs before the other
	// connections of its namespace get -BUSY and SCRIPT KILL may stop it
	// (Redis's busy-reply-threshold; default DefaultScriptTimeLimit).
	ScriptTimeLimit time.Duration
	// ScriptMaxMemory bounds what one Lua script may allocate (default
	// script.DefaultMaxMemory; package script's memory.go says how).
	ScriptMaxMemory int64
	// ScriptCacheEvalMax is how many scripts EVAL keeps cached per
	// namespace before it evicts the least recently used (default
	// DefaultScriptCacheEvalMax, Redis 7.4's); ScriptCacheBytes bounds the
	// source bytes a namespace caches (default DefaultScriptCacheBytes).
	// script.go has the policy.
	ScriptCacheEvalMax int
	ScriptCacheBytes   int64
}

// Engine runs commands. It is safe for concurrent use; each Session is not.
type Engine struct {
	cfg       Config
	fakeClock bool // cfg.Now was injected: read it instead of the command's start time
	started   time.Time
	nextID    atomic.Int64
	commands  atomic.Int64
	conns     atomic.Int64
	blk       blocking       // blocking.go
	clients   clientRegistry // clients.go
	live      liveConfig     // config.go: what CONFIG SET changed
	scripts   scripting      // script.go
}

// New returns an Engine.
func New(cfg Config) (*Engine, error) {
	if cfg.Registry == nil {
		return nil, errors.New("command: Config.Registry is required")
	}
	if cfg.MaxMemory < 0 {
		return nil, fmt.Errorf("command: MaxMemory %d is negative", cfg.MaxMemory)
	}
	if cfg.EvictionSamples <= 0 {
		cfg.EvictionSamples = DefaultEvictionSamples
	}
	fake := cfg.Now != nil
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Clients == nil {
		cfg.Clients = func() int { return 0 }
	}
	if cfg.ScriptTimeLimit <= 0 {
		cfg.ScriptTimeLimit = DefaultScriptTimeLimit
	}
	if cfg.ScriptMaxMemory <= 0 {
		cfg.ScriptMaxMemory = script.DefaultMaxMemory
	}
	if cfg.ScriptCacheEvalMax <= 0 {
		cfg.ScriptCacheEvalMax = DefaultScriptCacheEvalMax
	}
	if cfg.ScriptCacheBytes <= 0 {
		cfg.ScriptCacheBytes = DefaultScriptCacheBytes
	}
	return &Engine{cfg: cfg, started: cfg.Now(), fakeClock: fake}, nil
}

// Session is one connection's state. Create it with NewSession.
type Session struct {
	ID    int64
	Addr  string // the client's address
	LAddr string // the node's address of the connection (CLIENT KILL LADDR)
	// Proto, Name, LibName, LibVer and NS change under info (setInfo),
	// since other connections read them (CLIENT LIST, clients.go).
	Proto   int
	Name    string
	LibName string
	LibVer  string
	NS      *namespace.Namespace
	Authed  bool
	// Quit is set by QUIT: the server closes the connection after the reply.
	Quit bool
	// Asking is set by ASKING for the next command only (cluster mode; it
	// will let that command run on an importing slot once slots migrate).
	Asking bool
	// ReadOnly is set by READONLY, cleared by READWRITE (replica reads, later).
	ReadOnly bool
	// CanBlock: the connection can wait for a blocking command (BLPOP and
	// the like; the server sets it, see Blocked). Without it, and inside
	// MULTI or a script, those commands answer at once as if timed out.
	CanBlock bool
	// Wake, when set, is called from another goroutine when the command
	// this session blocked on completes (served, timed out or unblocked);
	// see ArmWait (blocking.go).
	Wake func()
	// block is the blocking command this session waits on, nil when none;
	// ready the keys its commands made ready for blocked clients (served
	// once the command, or EXEC, is done).
	block *waiter
	ready []readyKey
	// waiting is block for other connections (CLIENT UNBLOCK, LIST's
	// flags); info guards the fields they read; kill closes the
	// connection (Attach); created is when it connected (unix ms).
	waiting atomic.Pointer[waiter]
	info    sync.Mutex
	kill    func()
	created int64
	// txn is the connection's MULTI queue and WATCHes (multi.go), nil
	// when it has neither.
	txn *txnState

	// Reused per command so Exec does not allocate them.
	ctx  Ctx
	tx   keyspace.Txn
	keys [8][]byte
}

// NewSession returns the state of a new connection, bound to the default
// namespace.
func (e *Engine) NewSession(addr string) *Session {
	e.conns.Add(1)
	ns, _ := e.cfg.Registry.Get(namespace.Default)
	return &Session{ID: e.nextID.Add(1), Proto: 2, Addr: addr, NS: ns, created: e.cfg.Now().UnixMilli()}
}

// Ctx is what a handler sees.
type Ctx struct {
	e    *Engine
	Args [][]byte
	W    *resp.Writer
	S    *Session
	NS   *namespace.Namespace
	Tx   *keyspace.Txn
	spec *Spec
	// asking: ASKING preceded this command (MULTI keeps it for EXEC).
	asking bool
	// batch is set while the command runs inside EXEC or a script, on the
	// batch's locks (batch.go).
	batch *batch
}

func (c *Ctx) db() Keyspace {
	if c.batch != nil && c.Tx.HoldsAll() {
		return heldKeyspace{c.e.keyspace(c.NS), c.Tx}
	}
	return c.e.keyspace(c.NS)
}

func (e *Engine) keyspace(ns *namespace.Namespace) Keyspace {
	if e.cfg.Keyspace != nil {
		return e.cfg.Keyspace(ns)
	}
	return ns.DB
}

// read returns the live entry at key, counting a hit or a miss.
func (c *Ctx) read(key []byte) *keyspace.Entry {
	e := c.Tx.Get(key)
	p := c.NS.Prefix(key)
	if e == nil {
		c.NS.Counters.Misses.Add(1)
		if p != nil {
			p.Misses.Add(1)
		}
	} else {
		c.NS.Counters.Hits.Add(1)
		if p != nil {
			p.Hits.Add(1)
		}
	}
	return e
}

// valueOK checks a value size against the namespace limit, replying with an
// error when it is too large.
func (c *Ctx) valueOK(n int) bool {
	if lim := c.NS.Settings().MaxValueSize; int64(n) > lim {
		c.W.Error(fmt.Sprintf("ERR value of %d bytes exceeds the namespace's max value size of %d bytes", n, lim))
		return false
	}
	return true
}

// defaultExpire is the deadline for a new key without an explicit TTL.
func (c *Ctx) defaultExpire() int64 {
	if ttl := c.NS.Settings().DefaultTTL; ttl > 0 {
		return c.Tx.Now() + ttl.Milliseconds()
	}
	return 0
}

const errHandingOver = "CLUSTERDOWN The primary is handing its slots over to a replica"

const errLoading = "LOADING Redis is loading the dataset in memory"

const errReadOnlyReplica = "READONLY You can't write against a read only replica."

// Close records that a session's connection is gone.
func (e *Engine) Close(s *Session) {
	e.conns.Add(-1)
	e.detach(s)
	e.discardTxn(s)
	if s.block != nil {
		e.abandon(s) // a blocked client that closes leaves the wait queues
	}
}

// Exec runs args (args[0] is the command name) for s, appending exactly one
// reply to w. args may alias a network buffer: nothing retains them.
func (e *Engine) Exec(s *Session, args [][]byte, w *resp.Writer) {
	e.ExecAt(s, args, w, time.Now().UnixMilli())
}

// ExecAt is Exec at a wall-clock reading (unix ms) the caller already has:
// TTLs, lazy expiry and rate limits see nowMs. The server reads the clock
// once per pipeline batch (reading it per command was 3-4 % of the node's
// CPU at -P 16), as Redis runs a command against a cached clock. With an
// injected Config.Now, that clock is read instead.
func (e *Engine) ExecAt(s *Session, args [][]byte, w *resp.Writer, nowMs int64) {
	if len(args) == 0 {
		w.Error("ERR empty command")
		return
	}
	w.Proto = s.Proto
	if s.txn != nil && s.txn.multi && e.queue(s, args, w, nowMs) {
		return // queued in MULTI, or refused and the transaction flagged
	}
	asking := s.Asking // ASKING covers the one command after it
	s.Asking = false
	spec := lookup(args[0])
	if spec == nil {
		w.Error(unknownCommand(args))
		return
	}
	if (spec.Arity > 0 && len(args) != spec.Arity) || (spec.Arity < 0 && len(args) < -spec.Arity) {
		w.Error("ERR wrong number of arguments for '" + spec.Name + "' command")
		return
	}
	if !s.Authed && !spec.has(flagNoAuth) && e.authRequired(s) {
		w.Error(errNoAuth)
		return
	}
	if e.cfg.Loading != nil && e.cfg.Loading.Load() && !spec.has(flagLoading) {
		w.Error(errLoading)
		return
	}
	ns := s.NS
	if ns.Removed() {
		w.Error("ERR namespace '" + ns.Name + "' no longer exists; AUTH into another one")
		return
	}
	if e.scripts.busy.Load() != 0 && e.busyFor(ns, spec, args) {
		w.Error(errBusyScript)
		return
	}
	keys := spec.keys(args, s.keys[:0])
	if e.cfg.Hold != nil && e.cfg.Hold.Load() && (len(keys) > 0 || spec.has(flagWrite)) {
		w.Error(errHandingOver)
		return
	}
	check := -1
	var q cluster.Query
	var m *cluster.Map
	if e.cfg.Cluster != nil {
		m = e.cfg.Cluster.Load()
		q = cluster.Query{Asking: asking, ReadOnly: s.ReadOnly, Write: spec.has(flagWrite)}
		var redirect string
		if len(keys) > 0 {
			redirect, check = m.Route(keys, q)
		} else if q.Write && m.Myself().IsReplica() {
			redirect = errReadOnlyReplica
		}
		if redirect == "" && q.Write && e.cfg.WriteFence != nil {
			redirect = e.cfg.WriteFence()
		}
		if redirect != "" {
			w.Error(redirect)
			return
		}
	}
	if len(keys) > 0 && e.cfg.Route != nil {
		if redirect := e.cfg.Route(keys); redirect != "" {
			w.Error(redirect)
			return
		}
	}
	if e.fakeClock {
		nowMs = e.cfg.Now().UnixMilli()
	}
	var start time.Time // zero: this command's latency is not sampled
	if e.commands.Add(1)%latencySampleEvery == 0 && e.cfg.Observe != nil {
		start = time.Now()
	}
	var pc *namespace.PrefixCounters // the first key's prefix, when counted
	if len(keys) > 0 {
		pc = ns.Prefix(keys[0])
	}
	reqBytes := 0
	for _, a := range args {
		reqBytes += len(a)
	}
	if spec.limited {
		if err := ns.Admit(reqBytes, nowMs); err != nil {
			what := "ops"
			if errors.Is(err, namespace.ErrRateBytes) {
				what = "bandwidth"
			}
			w.Error("ERR namespace '" + ns.Name + "' " + what + " rate limited")
			e.observe(ns, pc, spec, start, true)
			return
		}
	}
	if spec.has(flagDenyOOM) && !e.makeRoom(ns) {
		ns.Counters.OOM.Add(1)
		w.Error(errOOM)
		e.observe(ns, pc, spec, start, true)
		return
	}
	ns.Counters.Ops.Add(1)
	for _, k := range keys {
		ns.Hot.Observe(k)
	}
	if pc != nil {
		pc.Ops.Add(1)
	}
	before := len(w.Buf)
	c := &s.ctx
	*c = Ctx{e: e, Args: args, W: w, S: s, NS: ns, spec: spec, Tx: &s.tx, asking: asking}
	e.keyspace(ns).BeginAt(c.Tx, keys, nowMs)
	if m != nil && len(keys) > 0 {
		// The map may have changed while this command waited for the
		// locks (a slot's mover holds them while it moves a batch): route
		// again on the current one, so no command acts on a decision the
		// mover has made stale (a key written here after it moved away).
		if cur := e.cfg.Cluster.Load(); cur != m {
			m = cur
			var redirect string
			if redirect, check = m.Route(keys, q); redirect != "" {
				c.Tx.End()
				w.Error(redirect)
				e.observe(ns, pc, spec, start, true)
				return
			}
		}
	}
	if check >= 0 {
		// The slot is moving: whether the keys are here decides, under the
		// same locks the slot's mover takes.
		present := 0
		for _, k := range keys {
			if c.Tx.Peek(k) != nil {
				present++
			}
		}
		if redirect := m.RouteMoving(check, q, present, len(keys)-present); redirect != "" {
			c.Tx.End()
			w.Error(redirect)
			e.observe(ns, pc, spec, start, true)
			return
		}
	}
	spec.fn(c)
	if e.blk.n.Load() > 0 && spec.has(flagWrite) && s.block == nil {
		s.ready = e.blk.readyKeys(ns, keys, s.ready)
	}
	c.Tx.End()
	if len(s.ready) > 0 {
		e.serveReady(s, nowMs) // the clients blocked on what it pushed, before its reply goes out
	}
	if c.NS != ns { // AUTH/HELLO switched namespaces
		ns, pc = c.NS, nil
	}
	ns.ChargeReply(len(w.Buf)-before, nowMs)
	e.observe(ns, pc, spec, start, len(w.Buf) > before && w.Buf[before] == '-')
}

// NeedsAuth reports whether s must authenticate before running commands
// (the server then applies Redis's tighter protocol limits to its input).
func (e *Engine) NeedsAuth(s *Session) bool { return !s.Authed && e.authRequired(s) }

// authRequired: with RequireAuth, or when the default namespace has a
// secret (as Redis's requirepass), a connection must AUTH first.
func (e *Engine) authRequired(s *Session) bool {
	return e.cfg.RequireAuth || (s.NS.Name == namespace.Default && s.NS.Settings().HasSecret)
}

// latencySampleEvery: one command in N has its latency measured; reading
// the clock twice per command was a sixth of the command path's CPU.
const latencySampleEvery = 8

// observe reports a command to Config.Observe, and its latency when it
// was sampled to its first key's prefix (pc, nil when not counted).
func (e *Engine) observe(ns *namespace.Namespace, pc *namespace.PrefixCounters, spec *Spec, start time.Time, isErr bool) {
	if e.cfg.Observe == nil {
		return
	}
	d := time.Duration(-1)
	if !start.IsZero() {
		d = time.Since(start)
		if pc != nil {
			pc.Latency.Observe(d)
		}
	}
	e.cfg.Observe(ns, spec.Name, d, isErr)
}

// makeRoom evicts from ns until it is under its quota and the node under
// maxmemory. It reports false when it cannot (noeviction, nothing left to
// evict, or the per-command bound reached).
func (e *Engine) makeRoom(ns *namespace.Namespace) bool {
	node := e.cfg.Registry.NodeUsage()
	over := func() bool {
		return ns.OverQuota() || (e.maxMemory() > 0 && node.Load() > e.maxMemory())
	}
	for i := 0; over(); i++ {
		if i == maxEvictionsPerCommand {
			return false
		}
		if _, ok := ns.DB.EvictOne(e.evictionSamples()); !ok {
			return false
		}
	}
	return true
}

func unknownCommand(args [][]byte) string {
	var b strings.Builder
	b.WriteString("ERR unknown command '")
	b.WriteString(truncate(args[0], 128))
	b.WriteString("', with args beginning with: ")
	for i, a := range args[1:] {
		if i == 16 {
			break
		}
		b.WriteString("'")
		b.WriteString(truncate(a, 128))
		b.WriteString("' ")
	}
	return b.String()
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(b)
}

// parseInt parses a Redis integer argument.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	return n, err == nil
}

func parseFloat(b []byte) (float64, bool) {
	if len(b) == 0 || len(b) > 64 {
		return 0, false
	}
	s := string(b)
	if strings.ContainsAny(s, " \t\r\n") {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		ls := strings.ToLower(s)
		switch ls {
		case "inf", "+inf", "infinity", "+infinity", "-inf", "-infinity":
			return f, true
		}
		return 0, false
	}
	if f != f { // NaN
		return 0, false
	}
	return f, true
}

func eqFold(b []byte, s string) bool { return strings.EqualFold(string(b), s) }
