package script

import (
	"bytes"
	"math"
	"strconv"

	lua "github.com/yuin/gopher-lua"

	"github.com/portico-io/portico/cachenode/resp"
)

// Tables built here and in sandbox.go are sized with CreateTable:
// gopher-lua's NewTable reserves 32 array slots and a 32-entry map, a
// kilobyte and more per reply that a script mostly drops at once.

// parser turns one RESP reply (as the command layer wrote it) into the
// Lua value Redis gives a script.
type parser struct {
	b []byte
	L *lua.LState
}

// line returns the rest of the current line after its type byte.
func (p *parser) line() []byte {
	i := bytes.Index(p.b, []byte("\r\n"))
	if i < 0 {
		l := p.b[1:]
		p.b = nil
		return l
	}
	l := p.b[1:i]
	p.b = p.b[i+2:]
	return l
}

func (p *parser) value() lua.LValue {
	if len(p.b) == 0 {
		return lua.LNil
	}
	L := p.L
	switch p.b[0] {
	case '+':
		t := L.CreateTable(0, 1)
		t.RawSetString("ok", lua.LString(p.line()))
		return t
	case '-':
		return errTable(L, normalizeError("-"+string(p.line())))
	case ':':
		n, _ := strconv.ParseInt(string(p.line()), 10, 64)
		return lua.LNumber(n)
	case '$', '=':
		verbatim := p.b[0] == '='
		n, _ := strconv.Atoi(string(p.line()))
		if n < 0 {
			return lua.LFalse
		}
		s := p.b[:n]
		p.b = p.b[min(n+2, len(p.b)):]
		if verbatim && len(s) >= 4 {
			t, v := L.CreateTable(0, 1), L.CreateTable(0, 2)
			v.RawSetString("format", lua.LString(s[:3]))
			v.RawSetString("string", lua.LString(s[4:]))
			t.RawSetString("verbatim_string", v)
			return t
		}
		return lua.LString(s)
	case '*', '~', '%':
		kind := p.b[0]
		n, _ := strconv.Atoi(string(p.line()))
		if n < 0 {
			return lua.LFalse
		}
		switch kind {
		case '~':
			set := L.CreateTable(0, n)
			for i := 0; i < n; i++ {
				set.RawSet(p.value(), lua.LTrue)
			}
			t := L.CreateTable(0, 1)
			t.RawSetString("set", set)
			return t
		case '%':
			m := L.CreateTable(0, n)
			for i := 0; i < n; i++ {
				k := p.value()
				m.RawSet(k, p.value())
			}
			t := L.CreateTable(0, 1)
			t.RawSetString("map", m)
			return t
		}
		t := L.CreateTable(n, 0)
		for i := 1; i <= n; i++ {
			t.RawSetInt(i, p.value())
		}
		return t
	case '_':
		p.line()
		return lua.LNil
	case '#':
		return lua.LBool(string(p.line()) == "t")
	case ',':
		f, _ := strconv.ParseFloat(string(p.line()), 64)
		t := L.CreateTable(0, 1)
		t.RawSetString("double", lua.LNumber(f))
		return t
	case '(':
		t := L.CreateTable(0, 1)
		t.RawSetString("big_number", lua.LString(p.line()))
		return t
	}
	p.b = nil
	return lua.LNil
}

// reply appends v, a script's result, to w as Redis converts it.
// scriptProto is the RESP version the script chose (redis.setresp).
func reply(L *lua.LState, v lua.LValue, w *resp.Writer, scriptProto int) {
	switch x := v.(type) {
	case lua.LString:
		w.Bulk([]byte(x))
	case lua.LBool:
		switch {
		case scriptProto == 2 && bool(x):
			w.Int(1)
		case scriptProto == 2:
			w.Null()
		case w.Proto == 3 && bool(x):
			w.Buf = append(w.Buf, "#t\r\n"...)
		case w.Proto == 3:
			w.Buf = append(w.Buf, "#f\r\n"...)
		case bool(x):
			w.Int(1)
		default:
			w.Int(0)
		}
	case lua.LNumber:
		f := float64(x)
		switch {
		case math.IsNaN(f):
			w.Int(math.MinInt64)
		case f >= math.MaxInt64:
			w.Int(math.MinInt64) // C's conversion overflows the same way on x86-64
		case f <= math.MinInt64:
			w.Int(math.MinInt64)
		default:
			w.Int(int64(f))
		}
	case *lua.LTable:
		tableReply(L, x, w, scriptProto)
	default:
		w.Null()
	}
}

func tableReply(L *lua.LState, t *lua.LTable, w *resp.Writer, scriptProto int) {
	if s, ok := t.RawGetString("err").(lua.LString); ok {
		w.Error(string(s))
		return
	}
	if s, ok := t.RawGetString("ok").(lua.LString); ok {
		w.Simple(string(s))
		return
	}
	if d, ok := t.RawGetString("double").(lua.LNumber); ok {
		w.Double(float64(d))
		return
	}
	if s, ok := t.RawGetString("big_number").(lua.LString); ok {
		if w.Proto == 3 {
			w.Buf = append(append(append(w.Buf, '('), s...), '\r', '\n')
		} else {
			w.Bulk([]byte(s))
		}
		return
	}
	if vs, ok := t.RawGetString("verbatim_string").(*lua.LTable); ok {
		f, ok1 := vs.RawGetString("format").(lua.LString)
		s, ok2 := vs.RawGetString("string").(lua.LString)
		if ok1 && ok2 {
			if w.Proto == 3 {
				w.Buf = append(w.Buf, '=')
				w.Buf = strconv.AppendInt(w.Buf, int64(len(f)+1+len(s)), 10)
				w.Buf = append(append(append(append(append(w.Buf, '\r', '\n'), f...), ':'), s...), '\r', '\n')
			} else {
				w.Bulk([]byte(s))
			}
			return
		}
	}
	if m, ok := t.RawGetString("map").(*lua.LTable); ok {
		n := 0
		m.ForEach(func(lua.LValue, lua.LValue) { n++ })
		w.Map(n)
		m.ForEach(func(k, v lua.LValue) {
			reply(L, k, w, scriptProto)
			reply(L, v, w, scriptProto)
		})
		return
	}
	if s, ok := t.RawGetString("set").(*lua.LTable); ok {
		n := 0
		s.ForEach(func(lua.LValue, lua.LValue) { n++ })
		w.Set(n)
		s.ForEach(func(k, _ lua.LValue) { reply(L, k, w, scriptProto) })
		return
	}
	n := 0
	for t.RawGetInt(n+1) != lua.LNil {
		n++
	}
	w.Array(n)
	for i := 1; i <= n; i++ {
		reply(L, t.RawGetInt(i), w, scriptProto)
	}
}
