package script

import (
	"context"
	"errors"
	"regexp"
	"strconv"
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
// (WatchMemory, memory.go).
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
}

// Run runs s with keys and argv and appends its result to w (RESP
// version w.Proto): the converted return value, or the error it raised.
// Cancelling ctx stops the script; the error then names the cause
// (context.Cause; ErrKilled is worded as Redis words SCRIPT KILL's).
func Run(ctx context.Context, s *Script, keys, argv [][]byte, c Caller, w *resp.Writer, lim Limits) {
	v := pool.Get().(*vm)
	r := &run{s: s, lim: lim, caller: c, proto: 2}
	v.run = r
	L := v.L
	L.SetContext(ctx)
	v.globals.RawSetString("KEYS", stringsTable(L, keys))
	v.globals.RawSetString("ARGV", stringsTable(L, argv))
	fn := L.NewFunctionFromProto(s.proto)
	fn.Env = v.env
	L.Push(fn)
	err := L.PCall(0, 1, nil)
	switch {
	case ctx.Err() != nil:
		msg := "Script killed by user with SCRIPT KILL..."
		if cause := context.Cause(ctx); !errors.Is(cause, ErrKilled) {
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

func stringsTable(L *lua.LState, ss [][]byte) *lua.LTable {
	t := L.CreateTable(len(ss), 0)
	for _, s := range ss {
		t.Append(lua.LString(s))
	}
	return t
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
	args := make([][]byte, n)
	for i := 1; i <= n; i++ {
		switch a := L.Get(i).(type) {
		case lua.LString:
			args[i-1] = []byte(a)
		case lua.LNumber:
			args[i-1] = strconv.AppendFloat(nil, float64(a), 'g', 17, 64)
		default:
			return fail("ERR Lua redis lib command arguments must be strings or integers")
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
