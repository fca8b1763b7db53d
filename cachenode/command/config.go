package command

import (
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/portico-io/portico/cachenode/evict"
	"github.com/portico-io/portico/cachenode/namespace"
)

// CONFIG GET reports, under Redis's names, what clients and test harnesses
// read (maxmemory, maxmemory-policy, timeout, save, appendonly, databases,
// ...). CONFIG SET changes live what has a meaning on a cache node:
//
//   - maxmemory, maxmemory-samples, timeout: node-wide, so only a
//     connection in the default namespace may set them (an operator's, or
//     every connection's when the node requires no AUTH);
//   - maxmemory-policy: the connection's own namespace's policy, until
//     the namespaces file next changes (the file is the source of truth);
//
// and accepts a fixed parameter (save, appendonly, ...) set to the value it
// already has, so harnesses that turn persistence off work; anything else
// is refused with Redis's CONFIG SET error shapes. A CONFIG SET of several
// parameters applies all of them or none.

// liveConfig holds what CONFIG SET changed; a nil pointer keeps Config's.
type liveConfig struct {
	maxMemory atomic.Pointer[int64]
	samples   atomic.Pointer[int64]
	timeout   atomic.Int64 // idle client timeout, seconds (0 = none)
}

// maxMemory is the node's memory limit in bytes (0 = none): Config's until
// CONFIG SET maxmemory.
func (e *Engine) maxMemory() int64 {
	if p := e.live.maxMemory.Load(); p != nil {
		return *p
	}
	return e.cfg.MaxMemory
}

func (e *Engine) evictionSamples() int {
	if p := e.live.samples.Load(); p != nil {
		return int(*p)
	}
	return e.cfg.EvictionSamples
}

// IdleTimeout is how long a client may stay idle before the server closes
// it (Redis's timeout; 0 = never). A blocked client is not idle.
func (e *Engine) IdleTimeout() time.Duration {
	return time.Duration(e.live.timeout.Load()) * time.Second
}

// configParam is one parameter: its value, and for a settable one how to
// check and apply a new value.
type configParam struct {
	get func(c *Ctx) string
	// set checks v and returns the change to apply, or an error text
	// (Redis's "- <reason>" part). nil: fixed (see immutable).
	set func(c *Ctx, v string) (apply func(), err string)
	// immutable: CONFIG SET answers Redis's "can't set immutable config"
	// rather than "not supported" for another value.
	immutable bool
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// nodeWide refuses a node-wide parameter to a connection of a tenant.
func nodeWide(c *Ctx) string {
	if c.NS.Name != namespace.Default {
		return "a node-wide setting: only a connection in the default namespace may change it"
	}
	return ""
}

var configParams = map[string]configParam{
	"maxmemory": {get: func(c *Ctx) string { return itoa(c.e.maxMemory()) },
		set: func(c *Ctx, v string) (func(), string) {
			if msg := nodeWide(c); msg != "" {
				return nil, msg
			}
			n, err := namespace.ParseBytes(v)
			if err != nil {
				return nil, "argument must be a memory value"
			}
			return func() { c.e.live.maxMemory.Store(&n) }, ""
		}},
	"maxmemory-policy": {get: func(c *Ctx) string { return c.NS.Settings().Policy.String() },
		set: func(c *Ctx, v string) (func(), string) {
			p, err := evict.Parse(strings.ToLower(v))
			if err != nil {
				return nil, "argument(s) must be one of the following: allkeys-lru, allkeys-lfu, volatile-ttl, noeviction"
			}
			return func() { c.NS.SetPolicy(p) }, ""
		}},
	"maxmemory-samples": {get: func(c *Ctx) string { return itoa(int64(c.e.evictionSamples())) },
		set: func(c *Ctx, v string) (func(), string) {
			if msg := nodeWide(c); msg != "" {
				return nil, msg
			}
			n, ok := atoi([]byte(v))
			if !ok || n < 1 || n > 64 {
				return nil, "argument must be between 1 and 64 inclusive"
			}
			return func() { c.e.live.samples.Store(&n) }, ""
		}},
	"timeout": {get: func(c *Ctx) string { return itoa(c.e.live.timeout.Load()) },
		set: func(c *Ctx, v string) (func(), string) {
			if msg := nodeWide(c); msg != "" {
				return nil, msg
			}
			n, ok := atoi([]byte(v))
			if !ok || n < 0 || n > 1<<31-1 {
				return nil, "argument must be between 0 and 2147483647 inclusive"
			}
			return func() { c.e.live.timeout.Store(n) }, ""
		}},
	"save":                      {get: func(*Ctx) string { return "" }},
	"appendonly":                {get: func(*Ctx) string { return "no" }},
	"appendfsync":               {get: func(*Ctx) string { return "everysec" }},
	"databases":                 {get: func(*Ctx) string { return "1" }, immutable: true},
	"cluster-enabled":           {get: func(c *Ctx) string { return yesNo(c.e.cfg.Cluster != nil) }, immutable: true},
	"port":                      {get: func(c *Ctx) string { return itoa(int64(c.e.cfg.Port)) }, immutable: true},
	"proto-max-bulk-len":        {get: func(*Ctx) string { return itoa(maxString) }},
	"client-query-buffer-limit": {get: func(*Ctx) string { return "1073741824" }},
	"lazyfree-lazy-eviction":    {get: func(*Ctx) string { return "no" }},
	"activedefrag":              {get: func(*Ctx) string { return "no" }},
}

func cmdConfig(c *Ctx) {
	switch sub := lower(c.Args[1]); sub {
	case "get":
		if len(c.Args) < 3 {
			c.W.Error("ERR wrong number of arguments for 'config|get' command")
			return
		}
		configGet(c)
	case "set":
		if len(c.Args) < 4 || len(c.Args)%2 != 0 {
			c.W.Error("ERR wrong number of arguments for 'config|set' command")
			return
		}
		configSet(c)
	case "resetstat":
		c.W.OK()
	default:
		c.W.Error("ERR unknown subcommand '" + truncate(c.Args[1], 64) + "'. Try CONFIG HELP.")
	}
}

func configGet(c *Ctx) {
	names := make([]string, 0, len(configParams))
	for n := range configParams {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []string
	seen := map[string]bool{}
	for _, pat := range c.Args[2:] {
		lp := []byte(lower(pat))
		for _, n := range names {
			if !seen[n] && globMatch(lp, []byte(n)) {
				seen[n] = true
				out = append(out, n, configParams[n].get(c))
			}
		}
	}
	c.W.Map(len(out) / 2)
	for _, s := range out {
		c.W.BulkString(s)
	}
}

func configSet(c *Ctx) {
	fail := func(name, why string) {
		c.W.Error("ERR CONFIG SET failed (possibly related to argument '" + name + "') - " + why)
	}
	var applies []func()
	seen := map[string]bool{}
	for i := 2; i < len(c.Args); i += 2 {
		name, v := lower(c.Args[i]), string(c.Args[i+1])
		p, ok := configParams[name]
		if !ok {
			c.W.Error("ERR Unknown option or number of arguments for CONFIG SET - '" + truncate(c.Args[i], 128) + "'")
			return
		}
		if seen[name] {
			fail(name, "duplicate parameter")
			return
		}
		seen[name] = true
		if p.set == nil {
			switch {
			case strings.EqualFold(v, p.get(c)):
				continue // already so: nothing to change
			case p.immutable:
				fail(name, "can't set immutable config")
			default:
				fail(name, "not supported by cachenode, which keeps it at '"+p.get(c)+"'")
			}
			return
		}
		apply, why := p.set(c, v)
		if why != "" {
			fail(name, why)
			return
		}
		applies = append(applies, apply)
	}
	for _, a := range applies {
		a()
	}
	c.W.OK()
}
