package cachenode_test

import "testing"

// txScript covers MULTI/EXEC/DISCARD/WATCH/UNWATCH on one connection, with
// their error cases (the harness runs it on one connection per side).
var txScript = [][]any{
	{"EXEC"}, {"DISCARD"}, {"UNWATCH"},
	{"MULTI"}, {"SET", "a", "1"}, {"INCR", "a"}, {"GET", "a"}, {"LPUSH", "a", "x"}, {"EXEC"},
	{"MULTI"}, {"MULTI"}, {"SET", "b", "2"}, {"EXEC"}, {"GET", "b"},
	{"MULTI"}, {"SET", "c", "3"}, {"NOSUCH", "x"}, {"GET", "c"}, {"EXEC"}, {"EXISTS", "c"},
	{"MULTI"}, {"SET", "c"}, {"EXEC"}, {"EXISTS", "c"},
	{"MULTI"}, {"SET", "c", "3"}, {"DISCARD"}, {"EXISTS", "c"}, {"EXEC"},
	{"MULTI"}, {"WATCH", "a"}, {"EXEC"},
	{"MULTI"}, {"EXEC"},
	{"WATCH", "w"}, {"MULTI"}, {"SET", "w", "mine"}, {"EXEC"}, {"GET", "w"},
	{"WATCH", "w"}, {"SET", "w", "theirs"}, {"MULTI"}, {"SET", "w", "mine"}, {"EXEC"}, {"GET", "w"},
	{"WATCH", "w"}, {"UNWATCH"}, {"SET", "w", "x"}, {"MULTI"}, {"GET", "w"}, {"EXEC"},
	{"WATCH", "w", "w2"}, {"DEL", "w2"}, {"MULTI"}, {"PING"}, {"EXEC"},
	{"WATCH", "nokey"}, {"MULTI"}, {"SET", "nokey", "1"}, {"EXEC"},
	{"WATCH", "w"}, {"EXPIRE", "w", "100"}, {"MULTI"}, {"PING"}, {"EXEC"},
	{"WATCH", "w"}, {"MULTI"}, {"DISCARD"}, {"SET", "w", "y"}, {"MULTI"}, {"GET", "w"}, {"EXEC"},
	{"MSET", "k1", "1", "k2", "2"},
	{"MULTI"}, {"MGET", "k1", "k2"}, {"DEL", "k1"}, {"EXISTS", "k1", "k2"}, {"DBSIZE"}, {"KEYS", "k*"}, {"FLUSHDB"}, {"DBSIZE"}, {"EXEC"},
	{"MULTI"}, {"SET", "x", "1"}, {"EVAL", "return redis.call('INCR', KEYS[1])", "1", "x"}, {"SELECT", "0"}, {"ECHO", "hi"}, {"EXEC"},
	{"MULTI"}, {"HSET", "h", "f", "v"}, {"HGETALL", "h"}, {"SADD", "s", "m"}, {"SMEMBERS", "s"}, {"EXEC"},
	{"WATCH"}, {"MULTI", "x"}, {"EXEC", "x"},
}

// scriptScript covers EVAL/EVALSHA/SCRIPT and Lua↔RESP conversions.
var scriptScript = [][]any{
	{"EVAL", "return 1", "0"}, {"EVAL", "return 'x'", "0"}, {"EVAL", "return 3.99", "0"}, {"EVAL", "return -3.99", "0"},
	{"EVAL", "return true", "0"}, {"EVAL", "return false", "0"}, {"EVAL", "return nil", "0"},
	{"EVAL", "return {1,2,3.7,'a',nil,4}", "0"}, {"EVAL", "return {1,{2,{3,'x'}},{ok='fine'}}", "0"},
	{"EVAL", "return {err='My Error'}", "0"}, {"EVAL", "return {err='x'}", "0"}, {"EVAL", "return {ok='FINE'}", "0"},
	{"EVAL", "return redis.error_reply('My Err')", "0"}, {"EVAL", "return redis.error_reply('-CODE x')", "0"},
	{"EVAL", "return redis.status_reply('FINE')", "0"}, {"EVAL", "return redis.error_reply()", "0"},
	{"EVAL", "return redis.sha1hex('')", "0"}, {"EVAL", "return redis.sha1hex('abc')", "0"},
	{"EVAL", "return {KEYS[1], KEYS[2], ARGV[1], ARGV[2]}", "2", "k1", "k2", "a1", "a2"},
	{"EVAL", "return #KEYS + #ARGV", "0", "a", "b", "c"},
	{"EVAL", "return 1", "-1"}, {"EVAL", "return 1", "x"}, {"EVAL", "return 1", "3", "a"}, {"EVAL", "return 1"},
	{"EVAL", "return redis.call('SET', KEYS[1], ARGV[1])", "1", "s", "v"}, {"GET", "s"},
	{"EVAL", "return redis.call('GET', KEYS[1])", "1", "s"}, {"EVAL", "return redis.call('GET', 'nokey')", "0"},
	{"EVAL", "return type(redis.call('GET', 'nokey'))", "0"}, {"EVAL", "return redis.call('PING')", "0"},
	{"EVAL", "return type(redis.call('PING'))", "0"}, {"EVAL", "return redis.call('PING').ok", "0"},
	{"EVAL", "return redis.call('INCR', KEYS[1])", "1", "s"}, {"EVAL", "return redis.pcall('INCR', KEYS[1])", "1", "s"},
	{"EVAL", "local t = redis.pcall('INCR', KEYS[1]) return t.err", "1", "s"},
	{"EVAL", "local ok, e = pcall(redis.call, 'INCR', KEYS[1]) return {tostring(ok), e}", "1", "s"},
	{"EVAL", "return redis.call('nosuch')", "0"}, {"EVAL", "return redis.pcall('nosuch')", "0"},
	{"EVAL", "return redis.call('GET')", "0"}, {"EVAL", "return redis.call()", "0"},
	{"EVAL", "return redis.call('SET', 'a', {})", "0"}, {"EVAL", "return redis.call('SET', 'a', true)", "0"},
	{"EVAL", "return redis.call('MULTI')", "0"}, {"EVAL", "return redis.call('EVAL', 'return 1', '0')", "0"},
	{"EVAL", "redis.call('SET', 'n', 1.5) return redis.call('GET', 'n')", "0"},
	{"EVAL", "redis.call('SET', 'n', 100000000000000000000) return redis.call('GET', 'n')", "0"},
	{"EVAL", "redis.call('SET', 'n', 42) return redis.call('GET', 'n')", "0"},
	{"EVAL", "redis.call('SET', 'n', 0.1) return redis.call('GET', 'n')", "0"},
	{"EVAL", "redis.call('RPUSH', 'l', 'a', 'b', 'c') return redis.call('LRANGE', 'l', 0, -1)", "0"},
	{"EVAL", "return redis.call('LRANGE', 'nolist', 0, -1)", "0"},
	{"EVAL", "redis.call('HSET', 'h', 'f', 'v', 'g', 'w') return redis.call('HMGET', 'h', 'f', 'nof', 'g')", "0"},
	{"EVAL", "return redis.call('HGETALL', 'h')", "0"}, {"EVAL", "return redis.call('EXISTS', 'h', 'l', 'zz')", "0"},
	{"EVAL", "error('boom')", "0"}, {"EVAL", "error({err='X boom'})", "0"}, {"EVAL", "return x", "0"},
	{"EVAL", "x = 1", "0"}, {"EVAL", "return os", "0"}, {"EVAL", "return io", "0"}, {"EVAL", "return loadfile", "0"},
	{"EVAL", "return dofile", "0"}, {"EVAL", "return require", "0"}, {"EVAL", "return print", "0"},
	{"EVAL", "return tostring(1.5) .. ' ' .. tostring(10)", "0"}, {"EVAL", "return string.format('%d-%s', 7, 'x')", "0"},
	{"EVAL", "return math.floor(7.9) + math.max(1, 2)", "0"}, {"EVAL", "return table.concat({'a','b'}, ',')", "0"},
	{"EVAL", "return string.len('abc')", "0"}, {"EVAL", "return ('abc'):upper()", "0"},
	{"EVAL", "return tonumber('12') + 1", "0"}, {"EVAL", "return tonumber('x')", "0"},
	{"EVAL", "local t = {} for i = 1, 5 do t[#t+1] = i * 2 end return t", "0"},
	{"EVAL", "local function f(n) if n < 2 then return n end return f(n-1) + f(n-2) end return f(15)", "0"},
	{"EVAL", "local ok, e = pcall(error, 'x') return e", "0"},
	{"EVAL", "return redis.call('TYPE', 'h').ok", "0"},
	{"EVAL", "return {1, 2, {err='E b'}}", "0"},
	{"SCRIPT", "LOAD", "return 'loaded'"}, {"EVALSHA", "a2c8a02aaac7a3ee8e90b6c3df24bea79e0f4a4d", "0"},
	{"EVALSHA", "A2C8A02AAAC7A3EE8E90B6C3DF24BEA79E0F4A4D", "0"},
	{"EVALSHA", "0000000000000000000000000000000000000000", "0"}, {"EVALSHA", "abc", "0"},
	{"SCRIPT", "EXISTS", "a2c8a02aaac7a3ee8e90b6c3df24bea79e0f4a4d", "0000000000000000000000000000000000000000"},
	{"EVAL", "return 'cached'", "0"}, {"EVALSHA", "3a1d5a5b8d1bfb11a1f5abf8b8f4d9d59b6ac3b4", "0"},
	{"SCRIPT", "FLUSH"}, {"SCRIPT", "EXISTS", "a2c8a02aaac7a3ee8e90b6c3df24bea79e0f4a4d"},
	{"EVALSHA", "a2c8a02aaac7a3ee8e90b6c3df24bea79e0f4a4d", "0"},
	{"SCRIPT", "FLUSH", "ASYNC"}, {"SCRIPT", "FLUSH", "SYNC"}, {"SCRIPT", "FLUSH", "BOGUS"},
	{"SCRIPT", "KILL"}, {"SCRIPT", "BOGUS"}, {"SCRIPT", "LOAD"}, {"SCRIPT"}, {"SCRIPT", "EXISTS"},
	{"FUNCTION", "FLUSH"}, {"FUNCTION", "FLUSH", "ASYNC"}, {"FUNCTION", "KILL"},
	{"EVAL_RO", "return redis.call('GET', KEYS[1])", "1", "s"},
	{"EVAL_RO", "return redis.call('SET', KEYS[1], 'x')", "1", "s"},
	{"EVAL_RO", "return redis.pcall('DEL', KEYS[1])", "1", "s"},
	{"SCRIPT", "LOAD", "return redis.call('GET', KEYS[1])"},
	{"EVALSHA_RO", "d3c21d0c2b9ca22f82737626a27bcaf5d288f99f", "1", "s"},
	{"EVAL", "redis.call('DEL', 'tmp') redis.call('SADD', 'tmp', 'a') return redis.call('SCARD', 'tmp')", "0"},
	{"EVAL", "return redis.call('DBSIZE')", "0"},
}

// TestTransactionsConformWithRedisServer compares transactions with
// redis-server's, in RESP2 and RESP3.
func TestTransactionsConformWithRedisServer(t *testing.T) {
	conformance(t, txScript, map[string]bool{"KEYS": true, "SMEMBERS": true}, 2, 3)
}

// TestScriptsConformWithRedisServer compares Lua scripting with
// redis-server's, in RESP2 and RESP3.
func TestScriptsConformWithRedisServer(t *testing.T) {
	conformance(t, scriptScript, nil, 2, 3)
}
