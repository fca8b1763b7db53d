package script_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode/resp"
	"github.com/portico-io/portico/cachenode/script"
)

// echo answers every call with a fixed reply per command name, in the
// RESP version the script asked for.
type echo map[string]func(proto int, w *resp.Writer)

func (e echo) Call(args [][]byte, proto int, w *resp.Writer) {
	w.Proto = proto
	if f := e[strings.ToLower(string(args[0]))]; f != nil {
		f(proto, w)
		return
	}
	w.Array(len(args))
	for _, a := range args {
		w.Bulk(a)
	}
}

func run(t *testing.T, body string, proto int, c script.Caller) string {
	t.Helper()
	s, err := script.Compile(body)
	if err != nil {
		t.Fatal(err)
	}
	w := &resp.Writer{Proto: proto}
	script.Run(context.Background(), s, [][]byte{[]byte("k")}, [][]byte{[]byte("a")}, c, w, script.Limits{})
	return string(w.Buf)
}

func TestConversions(t *testing.T) {
	calls := echo{
		"hgetall": func(proto int, w *resp.Writer) { w.Map(1); w.BulkString("f"); w.BulkString("v") },
		"dbl":     func(proto int, w *resp.Writer) { w.Double(1.5) },
		"nil":     func(proto int, w *resp.Writer) { w.Null() },
	}
	for _, tc := range []struct {
		body  string
		proto int
		want  string
	}{
		{"return redis.call('x', 1.5, 42, KEYS[1], ARGV[1])", 2, "*5\r\n$1\r\nx\r\n$3\r\n1.5\r\n$2\r\n42\r\n$1\r\nk\r\n$1\r\na\r\n"},
		{"return redis.call('x', 0.1)[2]", 2, "$19\r\n0.10000000000000001\r\n"},
		{"return {1, 2.9, -2.9, 'x', nil, 5}", 2, "*4\r\n:1\r\n:2\r\n:-2\r\n$1\r\nx\r\n"},
		{"return true", 3, ":1\r\n"},
		{"return false", 3, "_\r\n"},
		{"return false", 2, "$-1\r\n"},
		{"redis.setresp(3) return true", 3, "#t\r\n"},
		{"redis.setresp(3) return redis.call('hgetall').map.f", 3, "$1\r\nv\r\n"},
		{"redis.setresp(3) return redis.call('hgetall')", 3, "%1\r\n$1\r\nf\r\n$1\r\nv\r\n"},
		{"redis.setresp(3) return redis.call('hgetall')", 2, "*2\r\n$1\r\nf\r\n$1\r\nv\r\n"},
		{"redis.setresp(3) return redis.call('dbl')", 3, ",1.5\r\n"},
		{"redis.setresp(3) return type(redis.call('nil'))", 3, "$3\r\nnil\r\n"},
		{"return type(redis.call('nil'))", 2, "$7\r\nboolean\r\n"},
		{"return {ok='fine'}", 2, "+fine\r\n"},
		{"return {err='E x'}", 2, "-E x\r\n"},
		{"return 1e300", 2, ":-9223372036854775808\r\n"},
	} {
		if got := run(t, tc.body, tc.proto, calls); got != tc.want {
			t.Errorf("%s (RESP%d) = %q, want %q", tc.body, tc.proto, got, tc.want)
		}
	}
}

func TestCompileError(t *testing.T) {
	_, err := script.Compile("return 1 +")
	var ce *script.CompileError
	if !errors.Is(err, script.ErrCompile) || !errors.As(err, &ce) || !strings.HasPrefix(ce.Msg, "user_script:1: ") {
		t.Fatalf("Compile = %v", err)
	}
}

// A cancelled context stops a loop, even under pcall, with the cause.
func TestKill(t *testing.T) {
	s, err := script.Compile("while true do pcall(function() while true do end end) end")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	calls := echo{}
	done := make(chan string)
	go func() {
		w := &resp.Writer{Proto: 2}
		script.Run(ctx, s, nil, nil, calls, w, script.Limits{})
		done <- string(w.Buf)
	}()
	cancel(script.ErrKilled)
	if got := <-done; !strings.HasPrefix(got, "-ERR Script killed by user with SCRIPT KILL... script: ") {
		t.Fatalf("killed: %q", got)
	}
}

// A Stop stops a script, inside a coroutine too, and its cause names why.
func TestStop(t *testing.T) {
	for _, tc := range []struct {
		body  string
		cause error
		want  string
	}{
		{"local co = coroutine.wrap(function() while true do end end) co()",
			script.ErrKilled, "-ERR Script killed by user with SCRIPT KILL... script: "},
		{"local co = coroutine.create(function() coroutine.wrap(function() while true do end end)() end) coroutine.resume(co)",
			script.ErrKilled, "-ERR Script killed by user with SCRIPT KILL... script: "},
		{"while true do end",
			&script.MemoryError{Limit: 7}, "-ERR Script stopped: the script's memory grew past the limit of 7 bytes script: "},
	} {
		s, err := script.Compile(tc.body)
		if err != nil {
			t.Fatal(err)
		}
		st := script.NewStop()
		done := make(chan string)
		go func() {
			w := &resp.Writer{Proto: 2}
			script.Run(st, s, nil, nil, echo{}, w, script.Limits{})
			done <- string(w.Buf)
		}()
		st.Stop(tc.cause)
		st.Stop(errors.New("a later cause does not count"))
		if got := <-done; !strings.HasPrefix(got, tc.want) {
			t.Fatalf("stopped with %v: %q", tc.cause, got)
		}
	}
}

// The watch marks a script busy once past its time limit, and never
// after Done.
func TestWatchBusy(t *testing.T) {
	busy := make(chan struct{})
	w := script.StartWatch(script.NewStop(), 0, time.Millisecond, func() { close(busy) })
	<-busy
	w.Done()

	w = script.StartWatch(script.NewStop(), 0, time.Hour, func() { t.Error("busy after Done") })
	w.Done()
}
