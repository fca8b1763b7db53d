package command

import (
	"container/list"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/namespace"
	"github.com/portico-io/portico/cachenode/resp"
	"github.com/portico-io/portico/cachenode/script"
	"github.com/portico-io/portico/cachenode/slots"
)

// EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, SCRIPT and FUNCTION FLUSH. A script
// runs as one batch (batch.go): standalone it holds every shard of its
// namespace, so it is atomic like Redis's, whatever keys it touches; in
// cluster mode its declared keys must share one slot (CROSSSLOT), it holds
// that slot's shard, and a key it did not declare must be of the same
// slot (a script that declared none takes the slot of its first key).
//
// Past Config.ScriptTimeLimit a running script is busy: the other
// connections of its namespace get -BUSY (other namespaces, tenants of
// their own, are not held up), and SCRIPT KILL stops it unless it has
// written (-UNKILLABLE). Commands already waiting for its locks when it
// became busy wait until it ends. The script cache is per namespace.

// DefaultScriptTimeLimit is Config.ScriptTimeLimit's default, Redis's
// busy-reply-threshold.
const DefaultScriptTimeLimit = 5 * time.Second

const (
	errBusyScript    = "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
	errNoScript      = "NOSCRIPT No matching script. Please use EVAL."
	errNotBusy       = "NOTBUSY No scripts in execution right now."
	errUnkillable    = "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command."
	errNegKeys       = "ERR Number of keys can't be negative"
	errTooManyKeys   = "ERR Number of keys can't be greater than number of args"
	errROScriptWrite = "ERR Write commands are not allowed from read-only scripts."
	errScriptUnknown = "ERR Unknown Redis command called from script"
	errScriptArity   = "ERR Wrong number of args calling Redis command from script"
	errScriptDenied  = "ERR This Redis command is not allowed from script"
	errScriptNonLoc  = "ERR Script attempted to access a non local key in a cluster node"
	errScriptSlots   = "ERR Script attempted to access keys that do not hash to the same slot"
	errScriptDown    = "ERR Script attempted to execute a command while the cluster is down"
)

// noScript: commands a script may not call (Redis's noscript flag).
var noScript = map[string]bool{"auth": true, "hello": true, "eval": true, "evalsha": true, "eval_ro": true,
	"evalsha_ro": true, "fcall": true, "fcall_ro": true, "multi": true, "exec": true, "discard": true, "watch": true,
	"unwatch": true, "quit": true, "reset": true, "subscribe": true, "psubscribe": true, "ssubscribe": true,
	"unsubscribe": true, "punsubscribe": true, "sunsubscribe": true, "monitor": true, "wait": true,
	"blpop": true, "brpop": true, "brpoplpush": true, "blmove": true, "bzpopmin": true, "bzpopmax": true}

// allowBusy: what a busy script's namespace may still run (Redis's
// allow-busy flag), besides SCRIPT KILL and FUNCTION KILL.
var allowBusy = map[string]bool{"auth": true, "hello": true, "multi": true, "discard": true, "unwatch": true,
	"quit": true, "reset": true}

func init() {
	reg("eval", -3, flagWrite|flagStale|flagMovableKeys, 0, 0, 0, "scripting", "2.6.0", ksRW, "Executes a server-side Lua script.", cmdEval)
	reg("evalsha", -3, flagWrite|flagStale|flagMovableKeys, 0, 0, 0, "scripting", "2.6.0", ksRW, "Executes a server-side Lua script by SHA1 digest.", cmdEval)
	reg("eval_ro", -3, flagReadonly|flagStale|flagMovableKeys, 0, 0, 0, "scripting", "7.0.0", ksRO, "Executes a read-only server-side Lua script.", cmdEval)
	reg("evalsha_ro", -3, flagReadonly|flagStale|flagMovableKeys, 0, 0, 0, "scripting", "7.0.0", ksRO, "Executes a read-only server-side Lua script by SHA1 digest.", cmdEval)
	for _, n := range []string{"eval", "evalsha", "eval_ro", "evalsha_ro"} {
		table[n].getKeys = evalKeys
	}
	reg("script", -2, 0, 0, 0, 0, "scripting", "2.6.0", nil, "A container for Lua scripts management commands.", cmdScript)
	reg("function", -2, 0, 0, 0, 0, "scripting", "7.0.0", nil, "A container for function commands (only FUNCTION FLUSH).", cmdFunction)
}

// evalKeys: the numkeys keys after the script; none when numkeys is bad
// (the handler answers the error).
func evalKeys(args [][]byte, buf [][]byte) [][]byte {
	n, ok := parseInt(args[2])
	if !ok || n < 0 || n > int64(len(args)-3) {
		return buf
	}
	return append(buf, args[3:3+n]...)
}

// The script cache, per namespace (a tenant's scripts never evict
// another's). Redis 7.0 never evicts a script: EVAL of generated source
// (a value inlined in the script instead of passed in ARGV) grows its
// cache until SCRIPT FLUSH or the process's end. Redis 7.4 keeps the
// scripts EVAL cached in an LRU of 500 and evicts the least recently used
// (counted in INFO's evicted_scripts), and never evicts the ones SCRIPT
// LOAD loaded, whose users will EVALSHA them. We do the same per
// namespace (Config.ScriptCacheEvalMax), and also bound the bytes of
// source a namespace caches (Config.ScriptCacheBytes): EVAL scripts are
// evicted to make room, and a SCRIPT LOAD that would pass it with only
// loaded scripts left is refused (errScriptCacheFull), where Redis would
// grow without bound.

// DefaultScriptCacheEvalMax is Config.ScriptCacheEvalMax's default,
// Redis 7.4's LRU length.
const DefaultScriptCacheEvalMax = 500

// DefaultScriptCacheBytes is Config.ScriptCacheBytes's default.
const DefaultScriptCacheBytes = 64 << 20

const errScriptCacheFull = "ERR the script cache of this namespace is full: SCRIPT FLUSH, or load fewer or smaller scripts"

// nsScripts is one namespace's cached scripts.
type nsScripts struct {
	bySHA map[string]*cachedScript
	lru   list.List // the EVAL-cached ones, most recently used first
	bytes int64     // source bytes of every cached script
}

type cachedScript struct {
	s    *script.Script
	eval *list.Element // in lru; nil: loaded by SCRIPT LOAD, never evicted
}

// scripting is an Engine's script cache and running scripts.
type scripting struct {
	mu      sync.Mutex
	cache   map[*namespace.Namespace]*nsScripts
	evicted atomic.Int64 // EVAL scripts evicted (INFO evicted_scripts)
	// running: every namespace's, few at a time (a script holds its
	// namespace's shards, or in cluster mode its slot's). One slice, so
	// starting and ending a script does not allocate.
	running []*running
	// busy counts running scripts past the time limit, so Exec pays one
	// atomic load per command while there are none.
	busy atomic.Int32
	// active counts running scripts (ScriptsRunning).
	active atomic.Int32
}

// running is one executing script.
type running struct {
	ns    *namespace.Namespace
	stop  *script.Stop
	wrote atomic.Bool
	busy  bool // under scripting.mu
	done  bool // under scripting.mu
}

// lookup returns ns's script sha (nil when not cached); touch marks an
// EVAL-cached one used (EVAL, EVALSHA; not SCRIPT EXISTS).
func (sc *scripting) lookup(ns *namespace.Namespace, sha string, touch bool) *script.Script {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	c := sc.cache[ns]
	if c == nil {
		return nil
	}
	x := c.bySHA[sha]
	if x == nil {
		return nil
	}
	if touch && x.eval != nil {
		c.lru.MoveToFront(x.eval)
	}
	return x.s
}

// store caches s for ns, as EVAL does (evictable) or as SCRIPT LOAD does
// (loaded: kept until SCRIPT FLUSH; an EVAL-cached one is promoted). It
// evicts EVAL scripts past evalMax or maxBytes, and refuses (false) a
// load that would pass maxBytes with no EVAL script left to evict.
func (sc *scripting) store(ns *namespace.Namespace, s *script.Script, loaded bool, evalMax int, maxBytes int64) bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.cache == nil {
		sc.cache = map[*namespace.Namespace]*nsScripts{}
	}
	c := sc.cache[ns]
	if c == nil {
		c = &nsScripts{bySHA: map[string]*cachedScript{}}
		sc.cache[ns] = c
	}
	size := int64(len(s.Body))
	if x := c.bySHA[s.SHA]; x != nil {
		if loaded && x.eval != nil {
			c.lru.Remove(x.eval)
			x.eval = nil
		} else if x.eval != nil {
			c.lru.MoveToFront(x.eval)
		}
		return true
	}
	if loaded {
		for c.bytes+size > maxBytes && c.lru.Len() > 0 {
			sc.evictOldest(c)
		}
		if c.bytes+size > maxBytes {
			return false
		}
	}
	x := &cachedScript{s: s}
	if !loaded {
		x.eval = c.lru.PushFront(x)
	}
	c.bySHA[s.SHA] = x
	c.bytes += size
	for c.lru.Len() > evalMax || (c.bytes > maxBytes && c.lru.Len() > 1) {
		sc.evictOldest(c)
	}
	return true
}

func (sc *scripting) evictOldest(c *nsScripts) {
	x := c.lru.Remove(c.lru.Back()).(*cachedScript)
	delete(c.bySHA, x.s.SHA)
	c.bytes -= int64(len(x.s.Body))
	sc.evicted.Add(1)
}

// cached counts the scripts cached over every namespace.
func (sc *scripting) cached() int64 {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	n := 0
	for _, c := range sc.cache {
		n += len(c.bySHA)
	}
	return int64(n)
}

func (sc *scripting) flush(ns *namespace.Namespace) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	delete(sc.cache, ns)
}

// ScriptsCached is the number of scripts in the cache, every namespace's.
func (e *Engine) ScriptsCached() int64 { return e.scripts.cached() }

// ScriptsRunning reports whether a script is executing: it holds its
// namespace's (or slot's) shards until it ends, which a script past its
// time limit may not do until SCRIPT KILL. An event loop then leaves
// every command to its connection's own goroutine (cachenode/server), so
// that no command it runs waits for those shards.
func (e *Engine) ScriptsRunning() bool { return e.scripts.active.Load() > 0 }

// ScriptsEvicted counts the EVAL-cached scripts evicted from the cache.
func (e *Engine) ScriptsEvicted() int64 { return e.scripts.evicted.Load() }

func (sc *scripting) start(r *running) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.running = append(sc.running, r)
	sc.active.Add(1)
}

func (sc *scripting) markBusy(r *running) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if !r.done && !r.busy {
		r.busy = true
		sc.busy.Add(1)
	}
}

func (sc *scripting) stop(r *running) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	r.done = true
	sc.active.Add(-1)
	if r.busy {
		sc.busy.Add(-1)
	}
	rs := sc.running
	for i, o := range rs {
		if o == r {
			rs[i] = rs[len(rs)-1]
			rs[len(rs)-1] = nil
			sc.running = rs[:len(rs)-1]
			break
		}
	}
}

// busyFor reports whether ns has a busy script and spec may not run.
func (e *Engine) busyFor(ns *namespace.Namespace, spec *Spec, args [][]byte) bool {
	if allowBusy[spec.Name] {
		return false
	}
	if (spec.Name == "script" || spec.Name == "function") && len(args) > 1 && eqFold(args[1], "kill") {
		return false
	}
	sc := &e.scripts
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for _, r := range sc.running {
		if r.ns == ns && r.busy {
			return true
		}
	}
	return false
}

// kill stops ns's busy scripts: NOTBUSY when there is none, UNKILLABLE
// (and nothing stopped) when one of them wrote.
func (sc *scripting) kill(ns *namespace.Namespace) string {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	var busy []*running
	for _, r := range sc.running {
		if r.ns == ns && r.busy {
			busy = append(busy, r)
		}
	}
	if len(busy) == 0 {
		return errNotBusy
	}
	for _, r := range busy {
		if r.wrote.Load() {
			return errUnkillable
		}
	}
	for _, r := range busy {
		r.stop.Stop(script.ErrKilled)
	}
	return ""
}

func cmdEval(c *Ctx) {
	name := c.spec.Name
	byName := strings.HasPrefix(name, "evalsha")
	n, ok := parseInt(c.Args[2])
	switch {
	case !ok:
		c.W.Error(errNotInt)
		return
	case n < 0:
		c.W.Error(errNegKeys)
		return
	case n > int64(len(c.Args)-3):
		c.W.Error(errTooManyKeys)
		return
	}
	var s *script.Script
	if byName {
		sha := strings.ToLower(string(c.Args[1]))
		if len(sha) == 40 {
			s = c.e.scripts.lookup(c.NS, sha, true)
		}
		if s == nil {
			c.W.Error(errNoScript)
			return
		}
	} else {
		sha := script.SHA1Hex(c.Args[1])
		if s = c.e.scripts.lookup(c.NS, sha, true); s == nil {
			var err error
			if s, err = script.Compile(string(c.Args[1])); err != nil {
				c.W.Error(compileError(err))
				return
			}
			c.e.scripts.store(c.NS, s, false, c.e.cfg.ScriptCacheEvalMax, c.e.cfg.ScriptCacheBytes)
		}
	}
	keys := c.Args[3 : 3+n]
	argv := c.Args[3+n:]
	c.e.runScript(c, s, keys, argv, strings.HasSuffix(name, "_ro"))
}

// runScript runs s in c's batch (EVAL in EXEC) or a batch of its own.
func (e *Engine) runScript(c *Ctx, s *script.Script, keys, argv [][]byte, readOnly bool) {
	b := c.batch
	if b == nil || c.Tx != b.tx { // not in EXEC, or run alone there
		b = e.newBatch(c.S, c.Tx.Now())
		b.readOnly = readOnly
		if e.cfg.Cluster == nil {
			c.Tx.End() // Exec locked the declared keys: take every shard instead
			b.all = true
			b.oom = !e.makeRoom(c.NS)
			b.begin()
		} else {
			// Exec routed the declared keys and holds their slot's shard
			// (eviction would lock it again: only look).
			b.tx, b.locked = c.Tx, true
			b.keys, b.routeKeys = keys, keys
			b.oom = e.overMemory(c.NS)
		}
		defer b.end()
	}
	h := &scriptHost{b: b, slot: -1, asking: c.asking}
	if len(keys) > 0 {
		h.slot = slots.Of(keys[0])
	}
	st := script.NewStop()
	r := &running{ns: c.NS, stop: st}
	h.r = r
	prev := b.script
	b.script = r
	e.scripts.start(r)
	watch := script.StartWatch(st, e.cfg.ScriptMaxMemory, e.cfg.ScriptTimeLimit, func() { e.scripts.markBusy(r) })
	script.Run(st, s, keys, argv, h, c.W, script.Limits{MaxMemory: e.cfg.ScriptMaxMemory})
	watch.Done()
	e.scripts.stop(r)
	b.script = prev
}

// scriptHost runs a script's redis.call()s in its batch.
type scriptHost struct {
	b      *batch
	r      *running
	slot   int // cluster mode: the script's slot, -1 until a key names it
	asking bool
}

var _ script.Caller = (*scriptHost)(nil)

func (h *scriptHost) Call(args [][]byte, proto int, w *resp.Writer) {
	spec := lookup(args[0])
	if spec == nil {
		w.Error(errScriptUnknown)
		return
	}
	if (spec.Arity > 0 && len(args) != spec.Arity) || (spec.Arity < 0 && len(args) < -spec.Arity) {
		w.Error(errScriptArity)
		return
	}
	if noScript[spec.Name] || spec.has(flagBlocking) {
		w.Error(errScriptDenied)
		return
	}
	keys := spec.keys(args, nil)
	if msg := h.place(spec, keys); msg != "" {
		w.Error(msg)
		return
	}
	if spec.has(flagWrite) && !h.b.readOnly {
		h.r.wrote.Store(true)
	}
	h.b.run(spec, args, keys, w)
}

// place checks, in cluster mode, that keys are of the script's one slot
// and served here, and locks that slot's shard when the script declared
// no keys.
func (h *scriptHost) place(spec *Spec, keys [][]byte) string {
	b := h.b
	if b.m == nil || len(keys) == 0 {
		return ""
	}
	m := b.e.cfg.Cluster.Load()
	q := cluster.Query{Asking: h.asking, ReadOnly: b.s.ReadOnly, Write: spec.has(flagWrite)}
	for _, k := range keys {
		slot := slots.Of(k)
		if h.slot >= 0 && slot != h.slot {
			if redirect, _ := m.Route([][]byte{k}, q); redirect != "" {
				return errScriptNonLoc
			}
			return errScriptSlots
		}
		if h.slot < 0 {
			redirect, _ := m.Route([][]byte{k}, q)
			switch {
			case strings.HasPrefix(redirect, "CLUSTERDOWN"):
				return errScriptDown
			case redirect != "":
				return errScriptNonLoc
			}
			h.slot = slot
		}
		if b.holds([][]byte{k}) {
			continue
		}
		if !b.locked {
			b.e.keyspace(b.ns).BeginAt(b.tx, nil, b.nowMs)
			b.locked = true
		}
		if b.tx.Held() {
			return errScriptSlots // EVAL in EXEC: the transaction's slot is another
		}
		b.tx.Extend(k)
		key := append([]byte(nil), k...)
		b.keys, b.routeKeys = [][]byte{key}, [][]byte{key}
	}
	return ""
}

func cmdScript(c *Ctx) {
	sub := lower(c.Args[1])
	arity := map[string]int{"load": 3, "exists": -3, "flush": -2, "kill": 2}[sub]
	if arity == 0 {
		c.W.Error("ERR unknown subcommand '" + truncate(c.Args[1], 128) + "'. Try SCRIPT HELP.")
		return
	}
	if (arity > 0 && len(c.Args) != arity) || (arity < 0 && len(c.Args) < -arity) {
		c.W.Error("ERR wrong number of arguments for 'script|" + sub + "' command")
		return
	}
	switch sub {
	case "load":
		s, err := script.Compile(string(c.Args[2]))
		if err != nil {
			c.W.Error(compileError(err))
			return
		}
		if !c.e.scripts.store(c.NS, s, true, c.e.cfg.ScriptCacheEvalMax, c.e.cfg.ScriptCacheBytes) {
			c.W.Error(errScriptCacheFull)
			return
		}
		c.W.BulkString(s.SHA)
	case "exists":
		c.W.Array(len(c.Args) - 2)
		for _, a := range c.Args[2:] {
			if c.e.scripts.lookup(c.NS, strings.ToLower(string(a)), false) != nil {
				c.W.Int(1)
			} else {
				c.W.Int(0)
			}
		}
	case "flush":
		if !flushMode(c.Args[2:]) {
			c.W.Error("ERR SCRIPT FLUSH only support SYNC|ASYNC option")
			return
		}
		c.e.scripts.flush(c.NS)
		c.W.OK()
	case "kill":
		if msg := c.e.scripts.kill(c.NS); msg != "" {
			c.W.Error(msg)
			return
		}
		c.W.OK()
	}
}

// compileError is the reply to a script that does not compile.
func compileError(err error) string {
	var ce *script.CompileError
	if errors.As(err, &ce) {
		return "ERR Error compiling script (new function): " + ce.Msg
	}
	return "ERR " + err.Error()
}

func flushMode(args [][]byte) bool {
	return len(args) == 0 || (len(args) == 1 && (eqFold(args[0], "sync") || eqFold(args[0], "async")))
}

// cmdFunction serves FUNCTION FLUSH (there are no functions to flush) and
// refuses the rest clearly.
func cmdFunction(c *Ctx) {
	sub := lower(c.Args[1])
	switch sub {
	case "flush":
		if !flushMode(c.Args[2:]) {
			c.W.Error("ERR FUNCTION FLUSH only supports SYNC|ASYNC option")
			return
		}
		c.W.OK()
	case "kill":
		c.W.Error("NOTBUSY No scripts in execution right now.")
	default:
		c.W.Error("ERR FUNCTION " + strings.ToUpper(truncate(c.Args[1], 64)) + " is not supported: this server has no Redis Functions (only FUNCTION FLUSH); use EVAL/EVALSHA")
	}
}

// overMemory reports whether a write in ns would need eviction first.
func (e *Engine) overMemory(ns *namespace.Namespace) bool {
	return ns.OverQuota() || (e.maxMemory() > 0 && e.cfg.Registry.NodeUsage().Load() > e.maxMemory())
}
