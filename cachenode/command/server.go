package command

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/portico-io/portico/cachenode/cluster"

	"github.com/portico-io/portico/cachenode/namespace"
)

// Version is what HELLO and INFO report as redis_version: the Redis
// release whose command semantics this node follows.
const Version = "7.2.0"

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func cmdPing(c *Ctx) {
	switch len(c.Args) {
	case 1:
		c.W.Simple("PONG")
	case 2:
		c.W.Bulk(c.Args[1])
	default:
		c.W.Error("ERR wrong number of arguments for 'ping' command")
	}
}

func cmdEcho(c *Ctx) { c.W.Bulk(c.Args[1]) }

func cmdSelect(c *Ctx) {
	n, ok := atoi(c.Args[1])
	if !ok {
		c.W.Error(errNotInt)
		return
	}
	if n != 0 {
		c.W.Error(errDBIndex)
		return
	}
	c.W.OK()
}

func cmdQuit(c *Ctx) {
	c.S.Quit = true
	c.W.OK()
}

// authenticate binds the session to namespace name if secret matches and
// writes the error reply otherwise.
func (c *Ctx) authenticate(name string, secret []byte, legacy bool) bool {
	ns, err := c.e.cfg.Registry.Auth(name, secret)
	switch {
	case errors.Is(err, namespace.ErrNoSecret) && legacy:
		c.W.Error(errNoPassword)
		return false
	case err != nil:
		c.W.Error(errWrongPass)
		return false
	}
	c.S.setInfo(func() { c.S.NS = ns })
	c.S.Authed, c.NS = true, ns
	return true
}

func cmdAuth(c *Ctx) {
	switch len(c.Args) {
	case 2:
		if c.authenticate(namespace.Default, c.Args[1], true) {
			c.W.OK()
		}
	case 3:
		if c.authenticate(string(c.Args[1]), c.Args[2], false) {
			c.W.OK()
		}
	default:
		c.W.Error(errSyntax)
	}
}

func cmdHello(c *Ctx) {
	proto := c.S.Proto
	i := 1
	if len(c.Args) > 1 {
		v, ok := atoi(c.Args[1])
		if !ok {
			c.W.Error("ERR Protocol version is not an integer or out of range")
			return
		}
		if v != 2 && v != 3 {
			c.W.Error(errNoProto)
			return
		}
		proto, i = int(v), 2
	}
	var name []byte
	for ; i < len(c.Args); i++ {
		switch lower(c.Args[i]) {
		case "auth":
			if i+2 >= len(c.Args) {
				c.W.Error("ERR Syntax error in HELLO option 'auth'")
				return
			}
			if !c.authenticate(string(c.Args[i+1]), c.Args[i+2], false) {
				return
			}
			i += 2
		case "setname":
			if i+1 >= len(c.Args) {
				c.W.Error("ERR Syntax error in HELLO option 'setname'")
				return
			}
			if !validClientName(c.Args[i+1]) {
				c.W.Error(errClientName)
				return
			}
			name = c.Args[i+1]
			i++
		default:
			c.W.Error("ERR Syntax error in HELLO option '" + truncate(c.Args[i], 64) + "'")
			return
		}
	}
	if !c.S.Authed && c.e.authRequired(c.S) {
		c.W.Error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
		return
	}
	c.S.setInfo(func() {
		if name != nil {
			c.S.Name = string(name)
		}
		c.S.Proto = proto
	})
	c.W.Proto = proto
	c.W.Map(7)
	c.W.BulkString("server")
	c.W.BulkString("redis")
	c.W.BulkString("version")
	c.W.BulkString(Version)
	c.W.BulkString("proto")
	c.W.Int(int64(proto))
	c.W.BulkString("id")
	c.W.Int(c.S.ID)
	c.W.BulkString("mode")
	c.W.BulkString(c.e.mode())
	c.W.BulkString("role")
	c.W.BulkString("master")
	c.W.BulkString("modules")
	c.W.Array(0)
}

func validClientName(b []byte) bool {
	for _, ch := range b {
		if ch < '!' || ch > '~' {
			return false
		}
	}
	return true
}

func cmdClient(c *Ctx) {
	sub := lower(c.Args[1])
	switch {
	case sub == "setname" && len(c.Args) == 3:
		if !validClientName(c.Args[2]) {
			c.W.Error(errClientName)
			return
		}
		c.S.setInfo(func() { c.S.Name = string(c.Args[2]) })
		c.W.OK()
	case sub == "getname" && len(c.Args) == 2:
		if c.S.Name == "" {
			c.W.Null()
			return
		}
		c.W.BulkString(c.S.Name)
	case sub == "id" && len(c.Args) == 2:
		c.W.Int(c.S.ID)
	case sub == "setinfo" && len(c.Args) == 4:
		if !validClientName(c.Args[3]) {
			c.W.Error("ERR " + lower(c.Args[2]) + " cannot contain spaces, newlines or special characters.")
			return
		}
		switch lower(c.Args[2]) {
		case "lib-name":
			c.S.setInfo(func() { c.S.LibName = string(c.Args[3]) })
		case "lib-ver":
			c.S.setInfo(func() { c.S.LibVer = string(c.Args[3]) })
		default:
			c.W.Error("ERR Unrecognized option '" + truncate(c.Args[2], 64) + "'")
			return
		}
		c.W.OK()
	case sub == "info" && len(c.Args) == 2:
		c.W.Verbatim(c.e.clientLine(c.S, c.nowMs()) + "\n")
	case sub == "list":
		clientList(c)
	case sub == "kill" && len(c.Args) >= 3:
		clientKill(c)
	case sub == "unblock" && (len(c.Args) == 3 || len(c.Args) == 4):
		clientUnblock(c)
	case sub == "unblock" && len(c.Args) > 4: // past its arity check, as Redis's handler words it
		c.W.Error("ERR unknown subcommand or wrong number of arguments for '" + truncate(c.Args[1], 128) + "'. Try CLIENT HELP.")
	case sub == "setname" || sub == "getname" || sub == "id" || sub == "setinfo" || sub == "info" || sub == "kill" || sub == "unblock":
		c.W.Error("ERR wrong number of arguments for 'client|" + sub + "' command")
	default:
		c.W.Error("ERR unknown subcommand '" + truncate(c.Args[1], 64) + "'. Try CLIENT HELP.")
	}
}

func cmdDBSize(c *Ctx) { c.W.Int(c.db().Len()) }

func cmdFlushDB(c *Ctx) {
	if len(c.Args) > 2 || (len(c.Args) == 2 && !eqFold(c.Args[1], "async") && !eqFold(c.Args[1], "sync")) {
		c.W.Error(errSyntax)
		return
	}
	c.db().Flush()
	c.W.OK()
}

func cmdTime(c *Ctx) {
	now := c.e.cfg.Now()
	c.W.Array(2)
	c.W.BulkString(itoa(now.Unix()))
	c.W.BulkString(itoa(int64(now.Nanosecond() / 1000)))
}

// cmdCache is CACHE HOTKEYS [namespace] (and SAMPLES, MIGRATIONS below): the sampled top keys with their
// estimated access counts (sampled count × sampling rate). A connection
// sees its own namespace; one in "default" may name any namespace.
//
// CACHE MIGRATIONS lists the slots this node is migrating out: for each,
// [slot, to, epoch, moved, done (0/1), error] (what cachectl waits on
// before it hands a slot off).
func cmdCache(c *Ctx) {
	if eqFold(c.Args[1], "migrations") {
		if len(c.Args) != 2 {
			c.W.Error("ERR wrong number of arguments for 'cache|migrations' command")
			return
		}
		var st []cluster.MoveStatus
		if c.e.cfg.Moves != nil {
			st = c.e.cfg.Moves()
		}
		c.W.Array(len(st))
		for _, s := range st {
			c.W.Array(6)
			c.W.Int(int64(s.Slot))
			c.W.BulkString(s.To)
			c.W.Int(int64(s.Epoch))
			c.W.Int(s.Moved)
			done := int64(0)
			if s.Done {
				done = 1
			}
			c.W.Int(done)
			c.W.BulkString(s.Err)
		}
		return
	}
	if eqFold(c.Args[1], "samples") {
		cacheSamples(c)
		return
	}
	if !eqFold(c.Args[1], "hotkeys") {
		c.W.Error("ERR unknown subcommand '" + truncate(c.Args[1], 64) + "'. Try CACHE HOTKEYS, CACHE SAMPLES or CACHE MIGRATIONS.")
		return
	}
	if len(c.Args) > 3 {
		c.W.Error("ERR wrong number of arguments for 'cache|hotkeys' command")
		return
	}
	ns := c.NS
	if len(c.Args) == 3 && string(c.Args[2]) != ns.Name {
		if ns.Name != namespace.Default {
			c.W.Error("ERR a connection may only read its own namespace's hot keys")
			return
		}
		var err error
		if ns, err = c.e.cfg.Registry.Get(string(c.Args[2])); err != nil {
			c.W.Error("ERR no such namespace")
			return
		}
	}
	top := ns.Hot.Top()
	c.W.Array(len(top))
	for _, k := range top {
		c.W.Array(2)
		c.W.BulkString(k.Key)
		c.W.Int(int64(k.Count) * int64(ns.Hot.SampleEvery()))
	}
}

// maxSamples bounds one CACHE SAMPLES reply.
const maxSamples = 100000

// cacheSamples is CACHE SAMPLES [count]: the newest sampled key accesses
// (the key sample stream), oldest first, as [namespace, key, unix ms]. A
// connection sees its own namespace's; one in "default" sees every
// namespace's.
func cacheSamples(c *Ctx) {
	if len(c.Args) > 3 {
		c.W.Error("ERR wrong number of arguments for 'cache|samples' command")
		return
	}
	n := int64(1000)
	if len(c.Args) == 3 {
		var ok bool
		if n, ok = parseInt(c.Args[2]); !ok || n < 0 {
			c.W.Error("ERR count must be a non-negative integer")
			return
		}
	}
	if c.e.cfg.Samples == nil {
		c.W.Array(0)
		return
	}
	ns := c.NS.Name
	if ns == namespace.Default {
		ns = ""
	}
	got := c.e.cfg.Samples.Recent(int(min(n, maxSamples)), ns)
	c.W.Array(len(got))
	for _, s := range got {
		c.W.Array(3)
		c.W.BulkString(s.NS)
		c.W.BulkString(s.Key)
		c.W.Int(s.At)
	}
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2fG", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2fM", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.2fK", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

// rss reads the resident set size from /proc (0 where unavailable).
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func cmdInfo(c *Ctx) {
	want := map[string]bool{}
	for _, a := range c.Args[1:] {
		want[lower(a)] = true
	}
	all := len(want) == 0 || want["all"] || want["everything"] || want["default"]
	var b strings.Builder
	section := func(name string, lines ...string) {
		if !all && !want[strings.ToLower(name)] {
			return
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + name + "\r\n")
		for _, l := range lines {
			b.WriteString(l + "\r\n")
		}
	}
	e, ns := c.e, c.NS
	uptime := int64(e.cfg.Now().Sub(e.started).Seconds())
	section("Server",
		"redis_version:"+Version,
		"redis_mode:"+e.mode(),
		"portico_component:cachenode",
		"node_id:"+e.cfg.NodeID,
		"os:"+runtime.GOOS+" "+runtime.GOARCH,
		"go_version:"+runtime.Version(),
		"process_id:"+itoa(int64(os.Getpid())),
		"tcp_port:"+itoa(int64(e.cfg.Port)),
		"uptime_in_seconds:"+itoa(uptime),
		"uptime_in_days:"+itoa(uptime/86400))
	section("Clients", "connected_clients:"+itoa(int64(e.cfg.Clients())), "blocked_clients:"+itoa(e.blk.n.Load()))
	used := e.cfg.Registry.NodeUsage().Load()
	var ms runtime.MemStats
	if all || want["memory"] {
		runtime.ReadMemStats(&ms)
	}
	section("Memory",
		"used_memory:"+itoa(used),
		"used_memory_human:"+human(used),
		"used_memory_rss:"+itoa(rss()),
		"used_memory_heap:"+itoa(int64(ms.HeapInuse)),
		"maxmemory:"+itoa(e.maxMemory()),
		"maxmemory_human:"+human(e.maxMemory()),
		"maxmemory_policy:"+ns.Settings().Policy.String(),
		"number_of_cached_scripts:"+itoa(e.scripts.cached()),
		"namespace_used_memory:"+itoa(ns.DB.Used()),
		"namespace_maxmemory:"+itoa(ns.Settings().MaxMemory),
		"mem_allocator:go")
	var hits, misses, expired, evicted, keys int64
	for _, n := range e.cfg.Registry.All() {
		hits += n.Counters.Hits.Load()
		misses += n.Counters.Misses.Load()
		expired += n.DB.Expired()
		evicted += n.DB.Evicted()
		keys += n.DB.Len()
	}
	section("Stats",
		"total_commands_processed:"+itoa(e.commands.Load()),
		"keyspace_hits:"+itoa(hits),
		"keyspace_misses:"+itoa(misses),
		"expired_keys:"+itoa(expired),
		"evicted_keys:"+itoa(evicted),
		"evicted_scripts:"+itoa(e.scripts.evicted.Load()),
		"namespace_keyspace_hits:"+itoa(ns.Counters.Hits.Load()),
		"namespace_keyspace_misses:"+itoa(ns.Counters.Misses.Load()),
		"namespace_expired_keys:"+itoa(ns.DB.Expired()),
		"namespace_evicted_keys:"+itoa(ns.DB.Evicted()),
		"namespace_rate_limited:"+itoa(ns.Counters.RateLimited.Load()),
		"namespace_rejected_oom:"+itoa(ns.Counters.OOM.Load()))
	var ks []string
	if n := ns.DB.Len(); n > 0 {
		ks = append(ks, fmt.Sprintf("db0:keys=%d,expires=%d,avg_ttl=%d", n, ns.DB.Volatile(), ns.DB.AvgTTL()))
	}
	cl := "0"
	if e.cfg.Cluster != nil {
		cl = "1"
	}
	var repl []string
	if e.cfg.ReplicationInfo != nil {
		repl = strings.Split(strings.TrimSuffix(e.cfg.ReplicationInfo(), "\r\n"), "\r\n")
	} else {
		repl = []string{"role:master", "connected_slaves:0"}
	}
	section("Replication", repl...)
	section("Cluster", "cluster_enabled:"+cl)
	section("Keyspace", ks...)
	section("Namespace",
		"namespace:"+ns.Name,
		"keys:"+itoa(ns.DB.Len()),
		"node_keys:"+itoa(keys))
	c.W.Verbatim(b.String())
}

// mode is what HELLO and INFO report as the server mode.
func (e *Engine) mode() string {
	if e.cfg.Cluster != nil {
		return "cluster"
	}
	return "standalone"
}
