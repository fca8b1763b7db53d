package script

import (
	"errors"
	"fmt"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

const (
	errReadonly = "Attempt to modify a readonly table"
	// Version is what redis.REDIS_VERSION reports: the Redis whose
	// scripting behaviour this follows.
	Version    = "7.0.15"
	versionNum = 0x07000f
)

// vm is one Lua state with its sandbox. It runs one script at a time;
// idle ones wait in a pool.
type vm struct {
	L *lua.LState
	// env is every script's global table: an empty proxy whose metatable
	// reads through to globals and refuses writes. protected lists the
	// proxies, which must still be empty after a run (table.insert or
	// rawset could write into one): otherwise the state is dropped, so no
	// script sees what another left behind.
	env       *lua.LTable
	globals   *lua.LTable
	protected []*lua.LTable
	// run is the script running on this state (nil between runs).
	run *run
	// args is redis.call's argument arena (arena.go).
	args arena
	// fn is the last script's main function, fnProto its code.
	fn      *lua.LFunction
	fnProto *lua.FunctionProto
}

func newVM() *vm {
	L := lua.NewState(lua.Options{SkipOpenLibs: true, CallStackSize: 1024, RegistrySize: 1024 * 20, RegistryMaxSize: 1024 * 1024})
	for _, lib := range []struct {
		name string
		fn   lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString},
		{lua.MathLibName, lua.OpenMath}, {lua.CoroutineLibName, lua.OpenCoroutine}} {
		L.Push(L.NewFunction(lib.fn))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	v := &vm{L: L}
	std := L.G.Global
	// string.rep is bounded before it allocates (memory.go); the string
	// metatable's __index is this same table, so ("x"):rep(n) is too.
	std.RawGetString("string").(*lua.LTable).RawSetString("rep", L.NewFunction(v.strRep))
	g := L.NewTable()
	for _, name := range []string{"assert", "collectgarbage", "getmetatable", "ipairs", "next", "pairs",
		"rawequal", "rawget", "select", "setmetatable", "tonumber", "tostring", "type", "unpack", "xpcall", "_VERSION"} {
		g.RawSetString(name, std.RawGetString(name))
	}
	g.RawSetString("pcall", L.NewFunction(v.pcall))
	g.RawSetString("error", L.NewFunction(luaError))
	g.RawSetString("rawset", L.NewFunction(v.rawset))
	for _, name := range []string{"string", "table", "math", "coroutine"} {
		// A copy without the metamethods (the string library is its own
		// __index): nothing leads a script to the table the VM uses.
		lib := L.NewTable()
		std.RawGetString(name).(*lua.LTable).ForEach(func(k, v lua.LValue) {
			if ks, ok := k.(lua.LString); !ok || !strings.HasPrefix(string(ks), "__") {
				lib.RawSet(k, v)
			}
		})
		if name == "coroutine" {
			coroutineLib(L, lib)
		}
		g.RawSetString(name, v.readonly(lib))
	}
	// getmetatable("") would hand out the string library itself.
	if mt, ok := L.GetMetatable(lua.LString("")).(*lua.LTable); ok {
		mt.RawSetString("__metatable", g.RawGetString("string"))
	}
	g.RawSetString("redis", v.readonly(v.redisTable()))
	L.SetMetatable(g, v.metatable(lua.LNil, L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("Script attempted to access nonexistent global variable '%s'", L.ToString(2))
		return 0
	})))
	v.globals = g
	v.env = v.readonly(g)
	g.RawSetString("_G", v.env)
	return v
}

// coroutineLib makes a coroutine check the context of the state that
// created it, not a context.WithCancel of it (gopher-lua's NewThread):
// a script's *Stop has no Done channel to derive from until it is
// stopped (stop.go), and a coroutine must stop with the script.
func coroutineLib(L *lua.LState, lib *lua.LTable) {
	create := lib.RawGetString("create").(*lua.LFunction).GFunction
	wrap := lib.RawGetString("wrap").(*lua.LFunction).GFunction
	lib.RawSetString("create", L.NewFunction(func(L *lua.LState) int {
		n := create(L)
		if th, ok := L.Get(-1).(*lua.LState); ok {
			th.SetContext(L.Context())
		}
		return n
	}))
	lib.RawSetString("wrap", L.NewFunction(func(L *lua.LState) int {
		n := wrap(L) // a closure over the new coroutine
		if fn, ok := L.Get(-1).(*lua.LFunction); ok && len(fn.Upvalues) == 1 {
			if th, ok := fn.Upvalues[0].Value().(*lua.LState); ok {
				th.SetContext(L.Context())
			}
		}
		return n
	}))
}

// readonly returns an empty table reading through to t and refusing
// writes; its metatable is hidden from getmetatable and setmetatable.
func (v *vm) readonly(t *lua.LTable) *lua.LTable {
	p := v.L.NewTable()
	v.L.SetMetatable(p, v.metatable(t, nil))
	v.protected = append(v.protected, p)
	return p
}

// metatable builds a protected metatable: __index is index (a table or a
// function; nil leaves it out), writes raise errReadonly.
func (v *vm) metatable(index lua.LValue, indexFn *lua.LFunction) *lua.LTable {
	mt := v.L.NewTable()
	if indexFn != nil {
		mt.RawSetString("__index", indexFn)
	} else if index != lua.LNil {
		mt.RawSetString("__index", index)
	}
	mt.RawSetString("__newindex", v.L.NewFunction(func(L *lua.LState) int {
		L.RaiseError(errReadonly)
		return 0
	}))
	mt.RawSetString("__metatable", lua.LFalse)
	return mt
}

// clean reports whether every protected table is still empty.
func (v *vm) clean() bool {
	for _, p := range v.protected {
		if k, _ := p.Next(lua.LNil); k != lua.LNil {
			return false
		}
	}
	return true
}

func (v *vm) isProtected(t *lua.LTable) bool {
	if t == v.globals {
		return true
	}
	for _, p := range v.protected {
		if p == t {
			return true
		}
	}
	return false
}

// rawset refuses the sandbox's own tables.
func (v *vm) rawset(L *lua.LState) int {
	t := L.CheckTable(1)
	if v.isProtected(t) {
		L.RaiseError(errReadonly)
	}
	L.RawSet(t, L.CheckAny(2), L.CheckAny(3))
	L.SetTop(1)
	return 1
}

// pcall is Lua's, except that an error raised as a table with an err
// field (what redis.call raises) is returned as its err string, as Redis
// 7 does for scripts written against older versions.
func (v *vm) pcall(L *lua.LState) int {
	L.CheckAny(1)
	f := L.Get(1)
	if f.Type() != lua.LTFunction && L.GetMetaField(f, "__call").Type() != lua.LTFunction {
		L.Push(lua.LFalse)
		L.Push(lua.LString("attempt to call a " + f.Type().String() + " value"))
		return 2
	}
	if err := L.PCall(L.GetTop()-1, lua.MultRet, nil); err != nil {
		L.Push(lua.LFalse)
		obj := lua.LValue(lua.LString(err.Error()))
		var ae *lua.ApiError
		if errors.As(err, &ae) {
			obj = ae.Object
		}
		if t, ok := obj.(*lua.LTable); ok {
			if s, ok := t.RawGetString("err").(lua.LString); ok {
				obj = s
			}
		}
		L.Push(obj)
		return 2
	}
	L.Insert(lua.LTrue, 1)
	return L.GetTop()
}

// luaError is Lua's error, except that a position is added only when the
// function at level is Lua code (pcall(error, "x") raises a bare "x", as
// in Lua 5.1), and a table raised gets the line it was raised at, for the
// error's "on @user_script:<line>." suffix.
func luaError(L *lua.LState) int {
	obj := L.CheckAny(1)
	level := L.OptInt(2, 1)
	line := 0
	if dbg, ok := L.GetStack(level); ok && level > 0 {
		if _, err := L.GetInfo("Sl", dbg, lua.LNil); err == nil && dbg.What != "G" && dbg.CurrentLine > 0 {
			line = dbg.CurrentLine
		}
	}
	switch o := obj.(type) {
	case lua.LString:
		if line > 0 {
			obj = lua.LString(fmt.Sprintf("%s:%d: %s", chunkName, line, string(o)))
		}
	case *lua.LTable:
		if line > 0 && o.RawGetString("line") == lua.LNil {
			o.RawSetString("line", lua.LNumber(line))
		}
	}
	L.Error(obj, 0)
	return 0
}

// redisTable is the redis library.
func (v *vm) redisTable() *lua.LTable {
	L := v.L
	t := L.NewTable()
	fns := map[string]lua.LGFunction{
		"call":               func(L *lua.LState) int { return v.run.call(L, true) },
		"pcall":              func(L *lua.LState) int { return v.run.call(L, false) },
		"error_reply":        errorReply,
		"status_reply":       statusReply,
		"sha1hex":            sha1hex,
		"setresp":            func(L *lua.LState) int { return v.run.setresp(L) },
		"log":                logNoop,
		"set_repl":           func(L *lua.LState) int { return 0 },
		"replicate_commands": func(L *lua.LState) int { L.Push(lua.LTrue); return 1 },
		"breakpoint":         func(L *lua.LState) int { L.Push(lua.LFalse); return 1 },
		"debug":              func(L *lua.LState) int { return 0 },
	}
	for name, fn := range fns {
		t.RawSetString(name, L.NewFunction(fn))
	}
	for name, n := range map[string]float64{"LOG_DEBUG": 0, "LOG_VERBOSE": 1, "LOG_NOTICE": 2, "LOG_WARNING": 3,
		"REPL_NONE": 0, "REPL_AOF": 1, "REPL_SLAVE": 2, "REPL_REPLICA": 2, "REPL_ALL": 3, "REDIS_VERSION_NUM": versionNum} {
		t.RawSetString(name, lua.LNumber(n))
	}
	t.RawSetString("REDIS_VERSION", lua.LString(Version))
	return t
}

func errorReply(L *lua.LState) int {
	if L.GetTop() != 1 || L.Get(1).Type() != lua.LTString {
		L.Push(errTable(L, "ERR wrong number or type of arguments"))
		return 1
	}
	msg := L.ToString(1)
	if len(msg) == 0 || msg[0] != '-' {
		msg = "-" + msg
	}
	L.Push(errTable(L, normalizeError(msg)))
	return 1
}

func statusReply(L *lua.LState) int {
	if L.GetTop() != 1 || L.Get(1).Type() != lua.LTString {
		L.Push(errTable(L, "ERR wrong number or type of arguments"))
		return 1
	}
	t := L.CreateTable(0, 1)
	t.RawSetString("ok", L.Get(1))
	L.Push(t)
	return 1
}

func sha1hex(L *lua.LState) int {
	if L.GetTop() != 1 {
		L.Push(errTable(L, "ERR wrong number of arguments"))
		L.Error(L.Get(-1), 0)
	}
	L.Push(lua.LString(SHA1Hex([]byte(L.ToString(1)))))
	return 1
}

func logNoop(L *lua.LState) int {
	if L.GetTop() < 2 {
		L.Error(errTable(L, "ERR redis.log() requires two arguments or more."), 0)
	}
	return 0
}

// errTable is the {err=msg} table Redis represents errors with.
func errTable(L *lua.LState, msg string) *lua.LTable {
	t := L.CreateTable(0, 2) // err, and line when raised
	t.RawSetString("err", lua.LString(msg))
	return t
}

// normalizeError turns "-CODE msg" or "msg" into "CODE msg" ("ERR msg"
// when there is no code), as Redis's luaPushErrorBuff.
func normalizeError(s string) string {
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
		for i := 0; i < len(s); i++ {
			if s[i] == ' ' {
				return trimCRLF(s)
			}
		}
		return "ERR " + trimCRLF(s)
	}
	return "ERR " + trimCRLF(s)
}

func trimCRLF(s string) string {
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	return s
}

// strRep is string.rep with the run's memory limit checked first.
func (v *vm) strRep(L *lua.LState) int {
	str := L.CheckString(1)
	n := L.CheckInt(2)
	if n <= 0 || len(str) == 0 {
		L.Push(lua.LString(""))
		return 1
	}
	if lim := v.run.lim.MaxMemory; lim > 0 && int64(n) > lim/int64(len(str)) {
		L.RaiseError("string.rep of %d x %d bytes is over the script memory limit of %d bytes", n, len(str), lim)
	}
	L.Push(lua.LString(strings.Repeat(str, n)))
	return 1
}
