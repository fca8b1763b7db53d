package script

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"

	"github.com/portico-io/portico/cachenode/resp"
)

// Caller runs the commands a script calls.
type Caller interface {
	// Call runs args (args[0] is the command) and appends its reply, in
	// RESP version proto, to w. It may keep args until the script ends.
	Call(args [][]byte, proto int, w *resp.Writer)
}

var pool = sync.Pool{New: func() any { return newVM() }}

// Limits bound one run of a script; zero fields are no limit. The
// memory limit applies here to string.rep; the caller watches the rest
// (StartWatch, memory.go).
type Limits struct {
	MaxMemory int64
}

// run is one execution of a script.
type run struct {
	s      *Script
	lim    Limits
	caller Caller
	proto  int // RESP version of the replies the script sees (redis.setresp)
	buf    resp.Writer
	args   *arena // the vm's: redis.call's arguments
}

// Run runs s with keys and argv and appends its result to w (RESP
// version w.Proto): the converted return value, or the error it raised.
// Cancelling ctx stops the script; the error then names the cause
// (context.Cause, or a *Stop's; ErrKilled is worded as Redis words SCRIPT
// KILL's). Every Lua instruction checks ctx.Done: a *Stop is the
// cheapest context to give.
func Run(ctx context.Context, s *Script, keys, argv [][]byte, c Caller, w *resp.Writer, lim Limits) {
	v := pool.Get().(*vm)
	r := &run{s: s, lim: lim, caller: c, proto: 2, args: &v.args}
	v.run = r
	v.args.reset()
	L := v.L
	L.SetContext(ctx)
	keysT, argvT := argTables(L, keys, argv)
	v.globals.RawSetString("KEYS", keysT)
	v.globals.RawSetString("ARGV", argvT)
	L.Push(v.function(s))
	err := L.PCall(0, 1, nil)
	switch {
	case ctx.Err() != nil:
		msg := "Script killed by user with SCRIPT KILL..."
		cause := context.Cause(ctx)
		if st, ok := ctx.(*Stop); ok {
			cause = st.Cause()
		}
		if !errors.Is(cause, ErrKilled) {
			msg = "Script stopped: " + cause.Error()
		}
		w.Error("ERR " + msg + r.suffix(lineOf(err)))
	case err != nil:
		r.raised(err, w)
	default:
		reply(L, L.Get(-1), w, r.proto)
	}
	L.SetTop(0)
	L.RemoveContext()
	v.globals.RawSetString("KEYS", lua.LNil)
	v.globals.RawSetString("ARGV", lua.LNil)
	v.run = nil
	if ctx.Err() == nil && v.clean() { // a stopped script's state may hold what it built: drop it
		pool.Put(v)
	} else {
		v.L.Close()
	}
}

// function is s's main chunk as a Lua function in v's sandbox. The last
// one is kept: a script cannot reach its own function value (no debug
// library, no getfenv/setfenv), so nothing a run does changes it.
func (v *vm) function(s *Script) *lua.LFunction {
	if v.fnProto != s.proto {
		v.fn = v.L.NewFunctionFromProto(s.proto)
		v.fn.Env = v.env
		v.fnProto = s.proto
	}
	return v.fn
}

// argTables builds KEYS and ARGV, their strings cut from one copy of the
// arguments (one allocation for all of them instead of one each).
func argTables(L *lua.LState, keys, argv [][]byte) (*lua.LTable, *lua.LTable) {
	n := 0
	for _, a := range keys {
		n += len(a)
	}
	for _, a := range argv {
		n += len(a)
	}
	var b strings.Builder
	b.Grow(n)
	for _, a := range keys {
		b.Write(a)
	}
	for _, a := range argv {
		b.Write(a)
	}
	all := b.String()
	table := func(ss [][]byte) *lua.LTable {
		t := L.CreateTable(len(ss), 0)
		for _, s := range ss {
			t.Append(lua.LString(all[:len(s)]))
			all = all[len(s):]
		}
		return t
	}
	kt := table(keys)
	return kt, table(argv)
}

// suffix is what Redis appends to an error a script raised.
func (r *run) suffix(line int) string {
	l := "?"
	if line > 0 {
		l = strconv.Itoa(line)
	}
	return " script: " + r.s.SHA + ", on @" + chunkName + ":" + l + "."
}

var positionRE = regexp.MustCompile(`^` + chunkName + `:(\d+):`)

// lineOf finds the script line an error was raised at.
func lineOf(err error) int {
	var ae *lua.ApiError
	if !errors.As(err, &ae) {
		return 0
	}
	switch o := ae.Object.(type) {
	case lua.LString:
		if m := positionRE.FindStringSubmatch(string(o)); m != nil {
			n, _ := strconv.Atoi(m[1])
			return n
		}
	case *lua.LTable:
		if n, ok := o.RawGetString("line").(lua.LNumber); ok {
			return int(n)
		}
	}
	return 0
}

// raised writes the error a script raised, as Redis words it.
func (r *run) raised(err error, w *resp.Writer) {
	var ae *lua.ApiError
	if !errors.As(err, &ae) {
		w.Error("ERR " + err.Error() + r.suffix(0))
		return
	}
	line := lineOf(err)
	switch o := ae.Object.(type) {
	case *lua.LTable:
		if s, ok := o.RawGetString("err").(lua.LString); ok {
			w.Error(string(s) + r.suffix(line))
			return
		}
		w.Error("ERR " + o.String() + r.suffix(line))
	case lua.LString:
		w.Error("ERR " + string(o) + r.suffix(line))
	default:
		w.Error("ERR " + ae.Object.String() + r.suffix(line))
	}
}

// currentLine is the line of the innermost Lua function running.
func currentLine(L *lua.LState) int {
	for level := 0; ; level++ {
		dbg, ok := L.GetStack(level)
		if !ok {
			return 0
		}
		if _, err := L.GetInfo("Sl", dbg, lua.LNil); err == nil && dbg.CurrentLine > 0 {
			return dbg.CurrentLine
		}
	}
}

// call is redis.call (raise) and redis.pcall.
func (r *run) call(L *lua.LState, raise bool) int {
	fail := func(msg string) int {
		t := errTable(L, msg)
		if raise {
			t.RawSetString("line", lua.LNumber(currentLine(L)))
			L.Error(t, 0)
		}
		L.Push(t)
		return 1
	}
	n := L.GetTop()
	if n == 0 {
		return fail("ERR Please specify at least one argument for this redis lib call")
	}
	for i := 1; i <= n; i++ {
		switch L.Get(i).(type) {
		case lua.LString, lua.LNumber:
		default:
			return fail("ERR Lua redis lib command arguments must be strings or integers")
		}
	}
	a := r.args
	args := a.slice(n)
	var num [32]byte
	for i := 1; i <= n; i++ {
		switch x := L.Get(i).(type) {
		case lua.LString:
			args[i-1] = arenaCopy(a, string(x))
		case lua.LNumber:
			args[i-1] = arenaCopy(a, appendNumber(num[:0], float64(x)))
		}
	}
	L.SetTop(0)
	r.buf.Reset()
	r.buf.Proto = r.proto
	r.caller.Call(args, r.proto, &r.buf)
	p := parser{b: r.buf.Buf, L: L}
	v := p.value()
	if t, ok := v.(*lua.LTable); ok && raise && len(r.buf.Buf) > 0 && r.buf.Buf[0] == '-' {
		t.RawSetString("line", lua.LNumber(currentLine(L)))
		L.Error(t, 0)
	}
	L.Push(v)
	return 1
}

func (r *run) setresp(L *lua.LState) int {
	if L.GetTop() != 1 {
		L.Error(errTable(L, "ERR redis.setresp() requires one argument."), 0)
	}
	n := L.ToInt(1)
	if n != 2 && n != 3 {
		L.Error(errTable(L, "ERR RESP version must be 2 or 3."), 0)
	}
	r.proto = n
	return 0
}
