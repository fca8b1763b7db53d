// Package script runs Redis Lua scripts (EVAL) on gopher-lua, sandboxed
// as Redis 7 does: the libraries base (without dofile, loadfile, load,
// loadstring, require, print, getfenv, setfenv), string, table, math and
// coroutine; no os, io, package or debug; globals and library tables
// read-only (assigning a global is "Attempt to modify a readonly table",
// reading a missing one "Script attempted to access nonexistent global
// variable"); KEYS and ARGV; and the redis table: call, pcall, error_reply,
// status_reply, sha1hex, setresp, log, set_repl and replicate_commands
// (no-ops here), the LOG_* and REPL_* constants.
//
// Values cross between Lua and RESP by Redis's rules: a command's reply
// becomes a number (integer), a string (bulk), false (null bulk or
// array), a table (array), {ok=...} (status) or {err=...} (error; raised
// by redis.call, returned by redis.pcall); a script's result goes back as
// bulk (string), integer (number, truncated), 1 or null (boolean), an
// array of a table's elements up to its first nil, status or error for
// {ok=}/{err=} tables. Errors a script raises carry Redis's suffix
// " script: <sha>, on @user_script:<line>.".
//
// A script runs on one goroutine; Run is safe for concurrent use (each
// call takes a Lua state from a pool). The caller decides what a command
// does (Caller), when a script is too slow and whether it may be killed:
// cancelling Run's context stops the script at its next instruction, and
// no Lua code (pcall included) can catch that.
package script

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// chunkName is the source name Redis gives a script: error positions
// read "user_script:<line>:".
const chunkName = "user_script"

// Script is a compiled script. It is immutable and may run on any number
// of goroutines at once.
type Script struct {
	// SHA is the lowercase hex SHA1 of Body, the script's name in EVALSHA.
	SHA   string
	Body  string
	proto *lua.FunctionProto
}

// SHA1Hex is the lowercase hex SHA1 of b (redis.sha1hex, EVALSHA names).
func SHA1Hex(b []byte) string {
	sum := sha1.Sum(b)
	return hex.EncodeToString(sum[:])
}

// Compile parses and compiles body. A syntax error is a *CompileError.
func Compile(body string) (*Script, error) {
	chunk, err := parse.Parse(strings.NewReader(body), chunkName)
	if err != nil {
		return nil, &CompileError{Msg: compileMessage(err, body)}
	}
	proto, err := lua.Compile(chunk, chunkName)
	if err != nil {
		return nil, &CompileError{Msg: compileMessage(err, body)}
	}
	// gopher-lua marks every vararg function that does not use "..." as
	// needing Lua 5.0's implicit arg table, the main chunk too, so each
	// call would build a table (with a 32-entry map for its "n") that no
	// script can reach: the main chunk has no local named arg. Lua 5.1
	// gives the main chunk none either.
	proto.IsVarArg &^= lua.VarArgNeedsArg
	return &Script{SHA: SHA1Hex([]byte(body)), Body: body, proto: proto}, nil
}

// compileMessage gives gopher-lua's parse error Lua's shape,
// "user_script:<line>: <what>", where it can.
func compileMessage(err error, body string) string {
	var pe *parse.Error
	if errors.As(err, &pe) {
		if pe.Pos.Line <= 0 { // at the end of the script
			return fmt.Sprintf("%s:%d: %s near '<eof>'", chunkName, strings.Count(body, "\n")+1, pe.Message)
		}
		return fmt.Sprintf("%s:%d: %s near '%s'", chunkName, pe.Pos.Line, pe.Message, pe.Token)
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
}
