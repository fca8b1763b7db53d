package cachenode_test

import "testing"

// surfaceScript covers the blocking list commands (without blocking:
// data present, or a timeout short enough to compare), LMOVE/LMPOP/LPOS/
// LINSERT/LSET/LPUSHX, the set stores and cursors, string ranges and
// bitmaps, LCS, COPY/RENAMENX/EXPIRETIME/SORT and CONFIG, with their
// error and wrong-type cases. It avoids what legitimately differs: set
// iteration order (sets of several non-integer members are only compared
// through sorted results), hash field order beyond insertion in sorted
// order, databases other than 0, values over the namespace's 1 MB limit,
// and CONFIG values that are the node's own (maxmemory-policy, databases).
var surfaceScript = [][]any{
	// blocking pops that find data, time out, or refuse their arguments
	{"RPUSH", "bl", "a", "b", "c"}, {"BLPOP", "nokey", "bl", "0"}, {"BRPOP", "bl", "1"}, {"BLPOP", "bl", "bl", "0.5"},
	{"BLPOP", "bl", "0.01"}, {"BRPOP", "none1", "none2", "0.01"}, {"EXISTS", "bl"},
	{"BLPOP", "bl", "-1"}, {"BLPOP", "bl", "abc"}, {"BLPOP", "bl", "1e30"}, {"BLPOP", "bl", " 1"}, {"BLPOP", "bl", "nan"},
	{"BLPOP", "bl", "inf"}, {"BLPOP", "bl", "9223372036854775807"}, {"BLPOP", "bl"}, {"BRPOP"},
	{"SET", "str", "x"}, {"BLPOP", "str", "0"}, {"BLPOP", "nokey", "str", "0"}, {"RPUSH", "bl2", "z"}, {"BLPOP", "bl2", "str", "0"},
	{"BLPOP", "str", "-1"},
	{"RPUSH", "src", "1", "2", "3"}, {"BLMOVE", "src", "dst", "LEFT", "RIGHT", "0"}, {"BLMOVE", "src", "dst", "RIGHT", "LEFT", "0.1"},
	{"LRANGE", "dst", "0", "-1"}, {"BRPOPLPUSH", "src", "dst", "0"}, {"LRANGE", "dst", "0", "-1"}, {"EXISTS", "src"},
	{"BLMOVE", "src", "dst", "LEFT", "LEFT", "0.01"}, {"BRPOPLPUSH", "src", "dst", "0.01"}, {"BLMOVE", "src", "dst", "UP", "LEFT", "0"},
	{"BLMOVE", "src", "dst", "LEFT", "LEFT", "x"}, {"BLMOVE", "dst", "str", "LEFT", "LEFT", "0"}, {"LRANGE", "dst", "0", "-1"},
	{"BLMOVE", "dst", "dst", "LEFT", "RIGHT", "0"}, {"LRANGE", "dst", "0", "-1"}, {"BLMOVE", "str", "dst", "LEFT", "LEFT", "0"},
	{"RPUSH", "mp1", "a", "b", "c", "d"}, {"BLMPOP", "0", "2", "none", "mp1", "LEFT", "COUNT", "2"}, {"BLMPOP", "0", "1", "mp1", "RIGHT"},
	{"BLMPOP", "0.01", "1", "none", "LEFT"}, {"BLMPOP", "0", "0", "mp1", "LEFT"}, {"BLMPOP", "0", "x", "mp1", "LEFT"},
	{"BLMPOP", "0", "1", "mp1", "MIDDLE"}, {"BLMPOP", "0", "1", "mp1", "LEFT", "COUNT", "0"}, {"BLMPOP", "0", "1", "mp1", "LEFT", "COUNT"},
	{"BLMPOP", "abc", "1", "mp1", "LEFT"}, {"BLMPOP", "-1", "1", "mp1", "LEFT"}, {"BLMPOP", "0", "3", "mp1", "LEFT"},
	{"BLMPOP", "0", "1", "mp1", "LEFT", "COUNT", "1", "COUNT", "2"}, {"BLMPOP", "0", "1", "str", "LEFT"}, {"BLMPOP", "0", "2"},
	// non-blocking moves and multi-pops
	{"RPUSH", "m", "a", "b", "c"}, {"LMOVE", "m", "m2", "LEFT", "LEFT"}, {"LMOVE", "m", "m2", "RIGHT", "RIGHT"}, {"LRANGE", "m2", "0", "-1"},
	{"LMOVE", "m", "m", "LEFT", "RIGHT"}, {"LRANGE", "m", "0", "-1"}, {"LMOVE", "none", "m2", "LEFT", "LEFT"}, {"LMOVE", "m", "m2", "LEFT", "X"},
	{"LMOVE", "m", "str", "LEFT", "LEFT"}, {"LMOVE", "str", "m", "LEFT", "LEFT"}, {"RPOPLPUSH", "m2", "m3"}, {"RPOPLPUSH", "m2", "m3"},
	{"RPOPLPUSH", "m2", "m3"}, {"EXISTS", "m2"}, {"LRANGE", "m3", "0", "-1"}, {"RPOPLPUSH", "m3", "str"}, {"RPOPLPUSH", "none", "m3"},
	{"RPUSH", "lm", "1", "2", "3", "4", "5"}, {"LMPOP", "2", "none", "lm", "LEFT"}, {"LMPOP", "1", "lm", "RIGHT", "COUNT", "3"},
	{"LMPOP", "1", "lm", "LEFT", "COUNT", "10"}, {"LMPOP", "1", "lm", "LEFT"}, {"LMPOP", "0", "lm", "LEFT"}, {"LMPOP", "-1", "lm", "LEFT"},
	{"LMPOP", "1", "lm"}, {"LMPOP", "5", "lm", "LEFT"}, {"LMPOP", "1", "lm", "LEFT", "COUNT", "-1"}, {"LMPOP", "1", "lm", "LEFT", "BOGUS"},
	{"LMPOP", "2", "str", "lm", "LEFT"}, {"LMPOP", "1", "lm", "right", "count", "2"}, {"LMPOP", "1"},
	// LPOS, LINSERT, LSET, LPUSHX, RPUSHX
	{"RPUSH", "p", "a", "b", "c", "1", "2", "3", "c", "c"}, {"LPOS", "p", "c"}, {"LPOS", "p", "c", "RANK", "2"}, {"LPOS", "p", "c", "RANK", "-1"},
	{"LPOS", "p", "c", "RANK", "-2"}, {"LPOS", "p", "c", "COUNT", "0"}, {"LPOS", "p", "c", "COUNT", "2"}, {"LPOS", "p", "c", "RANK", "-1", "COUNT", "2"},
	{"LPOS", "p", "c", "COUNT", "0", "MAXLEN", "7"}, {"LPOS", "p", "c", "MAXLEN", "2"}, {"LPOS", "p", "x"}, {"LPOS", "p", "x", "COUNT", "3"},
	{"LPOS", "none", "x"}, {"LPOS", "none", "x", "COUNT", "1"}, {"LPOS", "p", "c", "RANK", "0"}, {"LPOS", "p", "c", "RANK", "x"},
	{"LPOS", "p", "c", "COUNT", "-1"}, {"LPOS", "p", "c", "MAXLEN", "-1"}, {"LPOS", "p", "c", "COUNT", "x"}, {"LPOS", "p", "c", "RANK"},
	{"LPOS", "p", "c", "BOGUS", "1"}, {"LPOS", "str", "c"}, {"LPOS", "p", "c", "RANK", "5"}, {"LPOS", "p", "c", "RANK", "-9223372036854775807"},
	{"LINSERT", "p", "BEFORE", "b", "X"}, {"LINSERT", "p", "AFTER", "3", "Y"}, {"LINSERT", "p", "AFTER", "nope", "Z"}, {"LRANGE", "p", "0", "-1"},
	{"LINSERT", "none", "BEFORE", "a", "b"}, {"LINSERT", "p", "MIDDLE", "a", "b"}, {"LINSERT", "str", "BEFORE", "a", "b"},
	{"LSET", "p", "0", "first"}, {"LSET", "p", "-1", "last"}, {"LSET", "p", "100", "x"}, {"LSET", "p", "-100", "x"}, {"LSET", "p", "x", "y"},
	{"LSET", "none", "0", "x"}, {"LSET", "none", "x", "x"}, {"LSET", "str", "0", "x"}, {"LRANGE", "p", "0", "-1"},
	{"LPUSHX", "p", "h1", "h2"}, {"RPUSHX", "p", "t1"}, {"LPUSHX", "none", "a"}, {"RPUSHX", "none", "a"}, {"EXISTS", "none"},
	{"LPUSHX", "str", "a"}, {"RPUSHX", "p"}, {"LRANGE", "p", "0", "2"},
	// sets: SMOVE, stores, SINTERCARD, SSCAN
	{"SADD", "s1", "a", "b", "c"}, {"SADD", "s2", "b", "c", "d"}, {"SMOVE", "s1", "s2", "a"}, {"SMOVE", "s1", "s2", "zz"},
	{"SMOVE", "none", "s2", "a"}, {"SMOVE", "s1", "s1", "b"}, {"SMOVE", "s1", "s1", "zz"}, {"SMOVE", "s1", "str", "b"},
	{"SMOVE", "str", "s1", "b"}, {"SMOVE", "s1", "snew", "b"}, {"SMEMBERS", "snew"}, {"SMOVE", "s1", "snew", "c"}, {"EXISTS", "s1"},
	{"SADD", "s1", "a", "b", "c"}, {"SINTERSTORE", "si", "s1", "s2"}, {"SMEMBERS", "si"}, {"SINTERSTORE", "si", "s1", "none"}, {"EXISTS", "si"},
	{"SUNIONSTORE", "su", "s1", "s2"}, {"SMEMBERS", "su"}, {"SDIFFSTORE", "sd", "s1", "s2"}, {"SMEMBERS", "sd"},
	{"SDIFFSTORE", "sd", "none", "s1"}, {"EXISTS", "sd"}, {"SINTERSTORE", "si", "s1", "str"}, {"SUNIONSTORE", "su", "str"},
	{"SET", "dstr", "v"}, {"SUNIONSTORE", "dstr", "s1"}, {"TYPE", "dstr"}, {"SINTERSTORE", "s1", "s1", "s2"}, {"SMEMBERS", "s1"},
	{"SINTERCARD", "2", "su", "s2"}, {"SINTERCARD", "2", "su", "s2", "LIMIT", "1"}, {"SINTERCARD", "2", "su", "s2", "LIMIT", "0"},
	{"SINTERCARD", "1", "none"}, {"SINTERCARD", "0", "su"}, {"SINTERCARD", "3", "su", "s2"}, {"SINTERCARD", "x", "su"},
	{"SINTERCARD", "2", "su", "s2", "LIMIT", "-1"}, {"SINTERCARD", "2", "su", "s2", "LIMIT"}, {"SINTERCARD", "2", "su", "s2", "BOGUS", "1"},
	{"SINTERCARD", "2", "su", "str"}, {"SINTERCARD", "2", "none", "str"},
	{"SADD", "nums", "10", "9", "100", "-1", "3"}, {"SSCAN", "nums", "0"}, {"SSCAN", "nums", "0", "MATCH", "1*"}, {"SSCAN", "nums", "0", "COUNT", "2"},
	{"SSCAN", "s2", "0", "MATCH", "d"}, {"SSCAN", "none", "0"}, {"SSCAN", "none", "0", "BOGUS"}, {"SSCAN", "nums", "x"}, {"SSCAN", "nums", "0", "COUNT", "0"},
	{"SSCAN", "nums", "0", "COUNT", "x"}, {"SSCAN", "nums", "0", "COUNT"}, {"SSCAN", "nums", "0", "TYPE", "set"}, {"SSCAN", "str", "0"},
	{"HSET", "hs", "a", "1", "b", "2", "c", "3"}, {"HSCAN", "hs", "0"}, {"HSCAN", "hs", "0", "MATCH", "b"}, {"HSCAN", "hs", "0", "COUNT", "1"},
	{"HSCAN", "none", "0"}, {"HSCAN", "str", "0"}, {"HSCAN", "hs", "abc"}, {"HSCAN", "hs", "0", "NOVALUE"},
	// strings: ranges, SETRANGE growth, GETSET, bits
	{"SET", "g", "Hello World"}, {"GETRANGE", "g", "0", "4"}, {"GETRANGE", "g", "-5", "-1"}, {"GETRANGE", "g", "-1", "-5"},
	{"GETRANGE", "g", "5", "100"}, {"GETRANGE", "g", "100", "200"}, {"GETRANGE", "g", "-100", "2"}, {"GETRANGE", "none", "0", "1"},
	{"GETRANGE", "g", "x", "1"}, {"GETRANGE", "m3", "0", "1"}, {"SUBSTR", "g", "0", "-7"}, {"SUBSTR", "g", "1"},
	{"SETRANGE", "g", "6", "Redis"}, {"GET", "g"}, {"SETRANGE", "g", "20", "!"}, {"GET", "g"}, {"STRLEN", "g"}, {"SETRANGE", "sr", "3", "ab"},
	{"GET", "sr"}, {"SETRANGE", "none2", "5", ""}, {"EXISTS", "none2"}, {"SETRANGE", "g", "0", ""}, {"SETRANGE", "g", "-1", "x"},
	{"SETRANGE", "g", "x", "x"}, {"SETRANGE", "m3", "0", "x"}, {"SETRANGE", "g", "536870912", "x"}, {"SETRANGE", "g", "536870911", "xx"},
	{"SET", "n", "42"}, {"SETRANGE", "n", "1", "7"}, {"GET", "n"}, {"INCR", "n"},
	{"GETSET", "gs", "1"}, {"GETSET", "gs", "2"}, {"GET", "gs"}, {"SET", "gs", "v", "EX", "100"}, {"GETSET", "gs", "w"}, {"TTL", "gs"},
	{"GETSET", "m3", "x"}, {"GETSET", "gs"},
	{"SETBIT", "b", "7", "1"}, {"SETBIT", "b", "7", "1"}, {"SETBIT", "b", "7", "0"}, {"SETBIT", "b", "100", "1"}, {"STRLEN", "b"},
	{"GETBIT", "b", "100"}, {"GETBIT", "b", "99"}, {"GETBIT", "b", "100000"}, {"GETBIT", "none", "0"}, {"SETBIT", "b", "-1", "1"},
	{"SETBIT", "b", "x", "1"}, {"SETBIT", "b", "1", "2"}, {"SETBIT", "b", "1", "-1"}, {"SETBIT", "b", "1", "x"}, {"SETBIT", "b", "4294967296", "1"},
	{"GETBIT", "b", "-1"}, {"GETBIT", "b", "4294967296"}, {"SETBIT", "m3", "0", "1"}, {"GETBIT", "m3", "0"},
	{"SET", "bc", "foobar"}, {"BITCOUNT", "bc"}, {"BITCOUNT", "bc", "0", "0"}, {"BITCOUNT", "bc", "1", "1"}, {"BITCOUNT", "bc", "1", "-2"},
	{"BITCOUNT", "bc", "-2", "-3"}, {"BITCOUNT", "bc", "5", "30", "BIT"}, {"BITCOUNT", "bc", "0", "-1", "BIT"}, {"BITCOUNT", "bc", "3", "3", "BIT"},
	{"BITCOUNT", "bc", "-9", "-2", "BIT"}, {"BITCOUNT", "bc", "0", "0", "BYTE"}, {"BITCOUNT", "bc", "0", "0", "BOGUS"}, {"BITCOUNT", "bc", "0"},
	{"BITCOUNT", "bc", "a", "0"}, {"BITCOUNT", "bc", "0", "a"}, {"BITCOUNT", "none", "a", "b"}, {"BITCOUNT", "none"}, {"BITCOUNT", "m3"},
	{"BITCOUNT", "bc", "0", "1", "BIT", "X"}, {"BITCOUNT", "bc", "100", "200"},
	{"SET", "bp", "\xff\xf0\x00"}, {"BITPOS", "bp", "0"}, {"BITPOS", "bp", "1"}, {"BITPOS", "bp", "0", "2"}, {"BITPOS", "bp", "1", "2"},
	{"BITPOS", "bp", "1", "1", "-1"}, {"BITPOS", "bp", "0", "0", "0"}, {"BITPOS", "bp", "1", "7", "15", "BIT"}, {"BITPOS", "bp", "0", "7", "15", "BIT"},
	{"BITPOS", "bp", "0", "12", "-1", "BIT"}, {"BITPOS", "bp", "1", "13", "-1", "BIT"}, {"BITPOS", "bp", "0", "0", "-1", "BYTE"},
	{"SET", "ones", "\xff\xff"}, {"BITPOS", "ones", "0"}, {"BITPOS", "ones", "0", "0"}, {"BITPOS", "ones", "0", "0", "-1"}, {"BITPOS", "ones", "0", "1", "1"},
	{"BITPOS", "ones", "0", "3", "BIT"}, {"BITPOS", "ones", "0", "3", "9", "BIT"}, {"BITPOS", "ones", "1", "3", "9", "BIT"},
	{"BITPOS", "none", "0"}, {"BITPOS", "none", "1"}, {"BITPOS", "none", "1", "a", "b"}, {"BITPOS", "bp", "2"}, {"BITPOS", "bp", "x"},
	{"BITPOS", "bp", "1", "x"}, {"BITPOS", "bp", "1", "0", "x"}, {"BITPOS", "bp", "1", "0", "1", "BOGUS"}, {"BITPOS", "bp", "1", "0", "x", "BOGUS"},
	{"BITPOS", "bp", "1", "0", "1", "BIT", "X"}, {"BITPOS", "m3", "1"}, {"BITPOS", "bp", "1", "10", "5"}, {"BITPOS", "bp", "0", "-1", "-2"},
	{"SET", "empty", ""}, {"BITPOS", "empty", "0"}, {"BITPOS", "empty", "1"}, {"BITCOUNT", "empty", "0", "-1"}, {"GETRANGE", "empty", "0", "-1"},
	{"SET", "k1", "abc"}, {"SET", "k2", "a\x00\xff"}, {"BITOP", "AND", "r", "k1", "k2"}, {"GET", "r"}, {"BITOP", "OR", "r", "k1", "k2", "none"},
	{"GET", "r"}, {"BITOP", "XOR", "r", "k1", "k2"}, {"GET", "r"}, {"BITOP", "NOT", "r", "k1"}, {"GET", "r"}, {"BITOP", "AND", "r", "k1", "none"},
	{"GET", "r"}, {"BITOP", "NOT", "r", "k1", "k2"}, {"BITOP", "NAND", "r", "k1"}, {"BITOP", "AND", "r", "none", "none"}, {"EXISTS", "r"},
	{"BITOP", "OR", "r", "k1", "m3"}, {"BITOP", "or", "r", "k1"}, {"GET", "r"}, {"BITOP", "AND", "r"},
	{"SET", "la", "ohmytext"}, {"SET", "lb", "mynewtext"}, {"LCS", "la", "lb"}, {"LCS", "la", "lb", "LEN"}, {"LCS", "la", "lb", "IDX"},
	{"LCS", "la", "lb", "IDX", "MINMATCHLEN", "4"}, {"LCS", "la", "lb", "IDX", "WITHMATCHLEN"}, {"LCS", "la", "lb", "IDX", "MINMATCHLEN", "-5", "WITHMATCHLEN"},
	{"LCS", "la", "lb", "LEN", "IDX"}, {"LCS", "la", "lb", "MINMATCHLEN"}, {"LCS", "la", "lb", "MINMATCHLEN", "x"}, {"LCS", "la", "lb", "BOGUS"},
	{"LCS", "la", "none"}, {"LCS", "none", "none", "IDX"}, {"LCS", "la", "m3"}, {"LCS", "la"},
	// keys: COPY, RENAMENX, EXPIRETIME, PEXPIRETIME
	{"SET", "c1", "v", "EX", "100"}, {"COPY", "c1", "c2"}, {"GET", "c2"}, {"TTL", "c2"}, {"COPY", "c1", "c2"}, {"COPY", "c1", "c2", "REPLACE"},
	{"COPY", "c1", "c1"}, {"COPY", "none", "c3"}, {"COPY", "c1", "c3", "DB", "0"}, {"COPY", "c1", "c3", "DB", "x"}, {"COPY", "c1", "c3", "BOGUS"},
	{"COPY", "c1", "c3", "DB"}, {"COPY", "p", "pc"}, {"LRANGE", "pc", "0", "-1"}, {"RPUSH", "p", "more"}, {"LLEN", "pc"}, {"COPY", "hs", "hc"},
	{"HGETALL", "hc"}, {"COPY", "su", "sc"}, {"SMEMBERS", "sc"}, {"COPY", "c1", "p", "REPLACE"}, {"TYPE", "p"}, {"COPY", "c1"},
	{"SET", "rn1", "a"}, {"SET", "rn2", "b"}, {"RENAMENX", "rn1", "rn2"}, {"RENAMENX", "rn1", "rn3"}, {"GET", "rn3"}, {"EXISTS", "rn1"},
	{"RENAMENX", "rn1", "rn4"}, {"RENAMENX", "rn3", "rn3"}, {"RENAMENX", "none", "none"},
	{"SET", "et", "v", "PXAT", "4102444800999"}, {"EXPIRETIME", "et"}, {"PEXPIRETIME", "et"}, {"SET", "et2", "v", "PXAT", "4102444800499"},
	{"EXPIRETIME", "et2"}, {"EXPIRETIME", "rn3"}, {"PEXPIRETIME", "rn3"}, {"EXPIRETIME", "none"}, {"PEXPIRETIME", "none"}, {"EXPIRETIME"},
	// SORT and SORT_RO
	{"RPUSH", "sl", "3", "1", "2", "10", "-5"}, {"SORT", "sl"}, {"SORT", "sl", "DESC"}, {"SORT", "sl", "ALPHA"}, {"SORT", "sl", "LIMIT", "1", "2"},
	{"SORT", "sl", "LIMIT", "-1", "2"}, {"SORT", "sl", "LIMIT", "10", "2"}, {"SORT", "sl", "LIMIT", "0", "-1"}, {"SORT", "sl", "LIMIT", "2", "0"},
	{"SORT", "sl", "BY", "nosort"}, {"SORT", "sl", "BY", "nosort", "DESC"}, {"SORT", "sl", "BY", "nosort", "LIMIT", "1", "2"},
	{"SORT", "sl", "BY", "nosort", "DESC", "LIMIT", "1", "2"},
	{"MSET", "w_3", "30", "w_1", "10", "w_2", "20", "w_10", "5", "o_1", "one", "o_2", "two"}, {"SORT", "sl", "BY", "w_*"},
	{"SORT", "sl", "BY", "w_*", "DESC"}, {"SORT", "sl", "BY", "w_*", "GET", "o_*"}, {"SORT", "sl", "BY", "w_*", "GET", "#", "GET", "o_*"},
	{"SORT", "sl", "GET", "o_*", "LIMIT", "0", "2"}, {"HSET", "hw_1", "f", "9"}, {"HSET", "hw_2", "f", "1"}, {"SORT", "sl", "BY", "hw_*->f", "GET", "hw_*->f"},
	{"SORT", "sl", "BY", "o_*", "ALPHA"}, {"SORT", "sl", "BY", "w_*", "LIMIT", "0", "2"},
	{"RPUSH", "sa", "b", "a", "c"}, {"SORT", "sa"}, {"SORT", "sa", "ALPHA"}, {"SORT", "sa", "ALPHA", "DESC"}, {"SORT", "sa", "ALPHA", "STORE", "sst"},
	{"LRANGE", "sst", "0", "-1"}, {"SORT", "sl", "STORE", "sst"}, {"LRANGE", "sst", "0", "-1"}, {"SORT", "none", "STORE", "sst"}, {"EXISTS", "sst"},
	{"SORT", "sl", "GET", "nostar", "STORE", "sst2"}, {"LRANGE", "sst2", "0", "-1"}, {"SORT", "sl", "GET", "o_*", "STORE", "sst3"}, {"LRANGE", "sst3", "0", "-1"},
	{"SADD", "sset", "5", "3", "9"}, {"SORT", "sset"}, {"SORT", "sset", "BY", "nosort", "STORE", "sst4"}, {"LRANGE", "sst4", "0", "-1"},
	{"RPUSH", "smix", "1", "a"}, {"SORT", "smix"}, {"SORT", "smix", "ALPHA"}, {"RPUSH", "sdup", "1", "1.0", "01", " 2", ""}, {"SORT", "sdup"},
	{"ZADD", "zs", "3", "10", "1", "5", "2", "7", "2", "a"}, {"SORT", "zs", "BY", "nosort"}, {"SORT", "zs", "BY", "nosort", "DESC", "LIMIT", "1", "2"},
	{"SORT", "zs", "ALPHA"}, {"SORT", "zs"}, {"SORT", "zs", "BY", "nosort", "STORE", "zst"}, {"LRANGE", "zst", "0", "-1"}, {"ZREM", "zs", "a"},
	{"SORT", "zs", "DESC"}, {"SORT_RO", "zs", "BY", "w_*", "GET", "#"},
	{"SORT", "str"}, {"SORT", "sl", "LIMIT", "1"}, {"SORT", "sl", "LIMIT", "x", "1"}, {"SORT", "sl", "BOGUS"}, {"SORT", "sl", "STORE"},
	{"SORT", "none"}, {"SORT_RO", "sl"}, {"SORT_RO", "sl", "STORE", "x"}, {"SORT_RO", "sl", "BY", "w_*", "GET", "o_*", "DESC"}, {"SORT"},
	// CONFIG
	{"CONFIG", "GET", "timeout"}, {"CONFIG", "GET", "maxmemory"}, {"CONFIG", "GET", "nosuch*"},
	{"CONFIG", "GET"}, {"CONFIG", "SET", "nosuch", "x"}, {"CONFIG", "SET", "timeout"}, {"CONFIG", "SET", "timeout", "-1"},
	{"CONFIG", "SET", "maxmemory", "abc"}, {"CONFIG", "SET", "timeout", "1", "timeout", "2"}, {"CONFIG", "SET", "databases", "5"},
	{"CONFIG", "SET", "save", ""}, {"CONFIG", "SET", "appendonly", "no"}, {"CONFIG", "SET", "timeout", "0"}, {"CONFIG", "SET", "maxmemory", "0"},
	{"CONFIG", "GET", "timeout"}, {"CONFIG", "BOGUS"},
}

// surfaceUnordered: the set results compared as sorted lists.
var surfaceUnordered = map[string]bool{"SMEMBERS": true}

// TestSurfaceConformanceWithRedisServer runs surfaceScript against
// cachenode and redis-server, RESP2 and RESP3.
func TestSurfaceConformanceWithRedisServer(t *testing.T) {
	conformance(t, surfaceScript, surfaceUnordered, 2, 3)
}
