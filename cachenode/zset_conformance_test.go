package cachenode_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
)

// zsetScript exercises the sorted-set commands against redis-server:
// options and their conflicts, every range syntax (scores with "(",
// infinities, hex and odd floats; lex with "[", "(", "-", "+"), LIMIT,
// REV, WITHSCORES, the STORE forms, weights and aggregates, sets as
// inputs, and the error cases and their order (syntax, then numbers, then
// WRONGTYPE). Besides small sets (Redis's listpack) it builds two past 128
// members (its skip list), where order, ranks and ranges must agree too.
// Left out: random picks (ZRANDMEMBER with a count below the set's size,
// or negative), and ZSCAN of a set past 128 members, whose cursor is
// Redis's hash-table position.
var zsetScript = func() [][]any {
	s := [][]any{
		// ZADD and its options
		{"ZADD", "z", "1", "a", "2", "b", "3", "c"}, {"ZADD", "z", "1", "a"}, {"ZADD", "z", "CH", "5", "a", "6", "new"},
		{"ZADD", "z", "NX", "10", "a", "7", "n2"}, {"ZADD", "z", "XX", "10", "a", "7", "n3"}, {"ZADD", "z", "XX", "CH", "11", "a", "8", "n4"},
		{"ZADD", "z", "GT", "CH", "1", "a", "20", "b"}, {"ZADD", "z", "LT", "CH", "1", "a", "30", "c"}, {"ZADD", "z", "GT", "LT", "1", "a"},
		{"ZADD", "z", "NX", "XX", "1", "a"}, {"ZADD", "z", "NX", "GT", "1", "a"}, {"ZADD", "z", "INCR", "1", "a", "2", "b"},
		{"ZADD", "z", "INCR", "2.5", "a"}, {"ZADD", "z", "INCR", "NX", "1", "a"}, {"ZADD", "z", "INCR", "XX", "1", "nosuch"},
		{"ZADD", "z", "INCR", "GT", "-1", "a"}, {"ZADD", "z", "INCR", "LT", "-1", "a"}, {"ZADD", "z", "1"}, {"ZADD", "z", "1", "a", "2"},
		{"ZADD", "z", "x", "a"}, {"ZADD", "z", "nan", "a"}, {"ZADD", "z", " 1", "a"}, {"ZADD", "z", "1 ", "a"}, {"ZADD", "z", "", "a"},
		{"ZADD", "z", "1e400", "a"}, {"ZADD", "z", "1e-400", "a"}, {"ZADD", "z", "0x10", "hex"}, {"ZADD", "z", "+inf", "top"},
		{"ZADD", "z", "-Infinity", "bottom"}, {"ZADD", "z", "1.5e3", "e"}, {"ZADD", "z", ".5", "dot"}, {"ZADD", "z", "-0", "negzero"},
		{"ZADD", "z", "0.1", "tenth"}, {"ZADD", "z", "1e20", "huge"}, {"ZADD", "z", "123456789012345678", "long"}, {"ZADD", "z", "INCR"},
		{"ZADD", "z", "BOGUS", "1", "a"}, {"ZADD", "newz", "XX", "1", "a"}, {"EXISTS", "newz"}, {"ZADD", "newz", "XX", "INCR", "1", "a"},
		{"ZRANGE", "z", "0", "-1", "WITHSCORES"}, {"ZSCORE", "z", "negzero"}, {"ZSCORE", "z", "tenth"}, {"ZSCORE", "z", "top"},
		{"ZSCORE", "z", "bottom"}, {"ZSCORE", "z", "long"}, {"ZSCORE", "z", "nosuch"}, {"ZSCORE", "nosuch", "a"},
		{"ZMSCORE", "z", "a", "nosuch", "top"}, {"ZMSCORE", "nosuch", "a", "b"}, {"ZMSCORE", "z"},
		// ZINCRBY
		{"ZINCRBY", "z", "1.5", "a"}, {"ZINCRBY", "z", "1", "brandnew"}, {"ZINCRBY", "z", "x", "a"}, {"ZINCRBY", "z", "-inf", "top"},
		{"ZINCRBY", "z", "inf", "bottom"}, {"ZINCRBY", "z", "xx", "a"}, {"ZINCRBY", "zi", "-0", "m"}, {"ZSCORE", "zi", "m"},
		{"ZINCRBY", "zi", "0.1", "m"}, {"ZINCRBY", "zi", "0.2", "m"}, {"ZINCRBY", "z", "1"},
		// ZCARD, ZRANK, ZREVRANK, ZREM
		{"ZCARD", "z"}, {"ZCARD", "nosuch"}, {"ZRANK", "z", "a"}, {"ZREVRANK", "z", "a"}, {"ZRANK", "z", "nosuch"},
		{"ZRANK", "nosuch", "a"}, {"ZREVRANK", "z", "top"}, {"ZRANK", "z", "bottom"}, {"ZREM", "z", "a", "nosuch", "a"},
		{"ZREM", "nosuch", "a"}, {"ZREM", "zi", "m"}, {"EXISTS", "zi"},
		// ZCOUNT and score ranges
		{"DEL", "z"}, {"ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e", "-inf", "lo", "+inf", "hi"},
		{"ZCOUNT", "z", "-inf", "+inf"}, {"ZCOUNT", "z", "2", "4"}, {"ZCOUNT", "z", "(2", "4"}, {"ZCOUNT", "z", "(2", "(4"},
		{"ZCOUNT", "z", "4", "2"}, {"ZCOUNT", "z", "(3", "(3"}, {"ZCOUNT", "z", "3", "3"}, {"ZCOUNT", "z", "x", "3"}, {"ZCOUNT", "z", "1", "nan"},
		{"ZCOUNT", "z", "(", "+inf"}, {"ZCOUNT", "z", "", "3"}, {"ZCOUNT", "z", " 2", "3"}, {"ZCOUNT", "z", "2 ", "3"},
		{"ZCOUNT", "z", "0x2", "0x1p2"}, {"ZCOUNT", "z", "-1e400", "1e400"}, {"ZCOUNT", "z", "((2", "3"}, {"ZCOUNT", "z", "inf", "inf"},
		{"ZCOUNT", "z", "(-inf", "(inf"}, {"ZCOUNT", "nosuch", "0", "1"}, {"ZCOUNT", "nosuch", "x", "1"},
		// ZRANGE by rank, by score, by lex; REV, LIMIT, WITHSCORES
		{"ZRANGE", "z", "0", "-1"}, {"ZRANGE", "z", "1", "3", "WITHSCORES"}, {"ZRANGE", "z", "-3", "-1"}, {"ZRANGE", "z", "5", "2"},
		{"ZRANGE", "z", "-100", "100"}, {"ZRANGE", "z", "100", "200"}, {"ZRANGE", "z", "0", "0", "REV", "WITHSCORES"},
		{"ZRANGE", "z", "1", "2", "REV"}, {"ZRANGE", "z", "a", "1"}, {"ZRANGE", "z", "0", "1", "LIMIT", "0", "1"},
		{"ZRANGE", "z", "0", "1", "LIMIT", "0", "-1"}, {"ZRANGE", "z", "0", "1", "BOGUS"}, {"ZRANGE", "z", "0", "1", "LIMIT", "0"},
		{"ZRANGE", "z", "2", "4", "BYSCORE"}, {"ZRANGE", "z", "(2", "+inf", "BYSCORE", "WITHSCORES"},
		{"ZRANGE", "z", "4", "2", "BYSCORE", "REV"}, {"ZRANGE", "z", "2", "4", "BYSCORE", "REV"},
		{"ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", "1", "3"}, {"ZRANGE", "z", "+inf", "-inf", "BYSCORE", "REV", "LIMIT", "1", "3", "WITHSCORES"},
		{"ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", "5", "-1"}, {"ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", "-1", "2"},
		{"ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", "100", "2"}, {"ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", "0", "0"},
		{"ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", "x", "1"}, {"ZRANGE", "z", "x", "1", "BYSCORE"},
		{"ZRANGE", "z", "0", "1", "BYSCORE", "BYLEX"}, {"ZRANGE", "z", "0", "1", "REV", "REV"}, {"ZRANGE", "z", "[a", "[c", "BYLEX", "WITHSCORES"},
		{"ZRANGE", "z", "0", "1", "BYLEX"}, {"ZRANGE", "nosuch", "0", "-1"}, {"ZRANGE", "nosuch", "x", "-1"},
		{"ZRANGEBYSCORE", "z", "2", "4"}, {"ZRANGEBYSCORE", "z", "-inf", "+inf", "WITHSCORES", "LIMIT", "2", "2"},
		{"ZRANGEBYSCORE", "z", "(1", "(5"}, {"ZRANGEBYSCORE", "z", "2", "4", "REV"}, {"ZRANGEBYSCORE", "z", "2", "4", "BYSCORE"},
		{"ZRANGEBYSCORE", "z", "2", "x"}, {"ZRANGEBYSCORE", "z", "2", "4", "LIMIT", "1"},
		{"ZREVRANGEBYSCORE", "z", "4", "2"}, {"ZREVRANGEBYSCORE", "z", "2", "4"}, {"ZREVRANGEBYSCORE", "z", "+inf", "(3", "WITHSCORES", "LIMIT", "1", "10"},
		{"ZREVRANGE", "z", "0", "2"}, {"ZREVRANGE", "z", "0", "2", "WITHSCORES"}, {"ZREVRANGE", "z", "-2", "-1"}, {"ZREVRANGE", "z", "0", "1", "REV"},
		{"ZREVRANGE", "z", "0", "1", "LIMIT", "0", "1"},
		{"DEL", "lex"}, {"ZADD", "lex", "0", "a", "0", "b", "0", "c", "0", "d", "0", "e", "0", "ff", "0", "g", "0", ""},
		{"ZRANGEBYLEX", "lex", "-", "+"}, {"ZRANGEBYLEX", "lex", "[b", "[d"}, {"ZRANGEBYLEX", "lex", "(b", "(d"},
		{"ZRANGEBYLEX", "lex", "[f", "+"}, {"ZRANGEBYLEX", "lex", "-", "(c", "LIMIT", "1", "1"}, {"ZRANGEBYLEX", "lex", "+", "-"},
		{"ZRANGEBYLEX", "lex", "b", "d"}, {"ZRANGEBYLEX", "lex", "[b", "d"}, {"ZRANGEBYLEX", "lex", "-x", "+"}, {"ZRANGEBYLEX", "lex", "[", "(c"},
		{"ZRANGEBYLEX", "lex", "[c", "[c"}, {"ZRANGEBYLEX", "lex", "(c", "[c"}, {"ZRANGEBYLEX", "lex", "-", "-"}, {"ZRANGEBYLEX", "lex", "+", "+"},
		{"ZRANGEBYLEX", "lex", "-", "+", "WITHSCORES"}, {"ZREVRANGEBYLEX", "lex", "+", "-"}, {"ZREVRANGEBYLEX", "lex", "[d", "(a", "LIMIT", "1", "2"},
		{"ZREVRANGEBYLEX", "lex", "-", "+"}, {"ZRANGE", "lex", "(ff", "[a", "BYLEX", "REV"}, {"ZRANGE", "lex", "[a", "[e", "BYLEX", "LIMIT", "2", "-5"},
		{"ZLEXCOUNT", "lex", "-", "+"}, {"ZLEXCOUNT", "lex", "[b", "(e"}, {"ZLEXCOUNT", "lex", "a", "+"}, {"ZLEXCOUNT", "nosuch", "-", "+"},
		// ZRANGESTORE
		{"ZRANGESTORE", "dst", "z", "0", "2"}, {"ZRANGE", "dst", "0", "-1", "WITHSCORES"}, {"ZRANGESTORE", "dst", "z", "(2", "+inf", "BYSCORE", "LIMIT", "1", "2"},
		{"ZRANGE", "dst", "0", "-1", "WITHSCORES"}, {"ZRANGESTORE", "dst", "lex", "[b", "[d", "BYLEX", "REV"}, {"ZRANGE", "dst", "0", "-1"},
		{"ZRANGESTORE", "dst", "z", "0", "1", "WITHSCORES"}, {"ZRANGESTORE", "dst", "z", "10", "20"}, {"EXISTS", "dst"},
		{"SET", "str", "v"}, {"ZRANGESTORE", "str", "z", "0", "0"}, {"TYPE", "str"}, {"ZRANGESTORE", "dst", "nosuch", "0", "-1"},
		{"ZRANGESTORE", "dst", "str", "0", "-1"}, {"ZRANGESTORE", "z", "z", "1", "2"}, {"ZRANGE", "z", "0", "-1", "WITHSCORES"},
		// removals
		{"DEL", "r"}, {"ZADD", "r", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e", "6", "f"}, {"ZREMRANGEBYRANK", "r", "0", "1"},
		{"ZREMRANGEBYRANK", "r", "-1", "-1"}, {"ZREMRANGEBYRANK", "r", "5", "1"}, {"ZREMRANGEBYRANK", "r", "x", "1"},
		{"ZRANGE", "r", "0", "-1"}, {"ZREMRANGEBYSCORE", "r", "(3", "4"}, {"ZREMRANGEBYSCORE", "r", "x", "4"}, {"ZRANGE", "r", "0", "-1"},
		{"ZADD", "r", "0", "aa", "0", "bb"}, {"ZREMRANGEBYLEX", "r", "[aa", "(bb"}, {"ZREMRANGEBYLEX", "r", "aa", "bb"},
		{"ZREMRANGEBYSCORE", "r", "-inf", "+inf"}, {"EXISTS", "r"}, {"ZREMRANGEBYRANK", "nosuch", "0", "-1"},
		{"ZREMRANGEBYLEX", "nosuch", "-", "+"}, {"ZREMRANGEBYSCORE", "nosuch", "0", "1"},
		// ZPOPMIN, ZPOPMAX
		{"DEL", "p"}, {"ZADD", "p", "1", "a", "2", "b", "3", "c", "4", "d"}, {"ZPOPMIN", "p"}, {"ZPOPMAX", "p"},
		{"ZPOPMIN", "p", "0"}, {"ZPOPMIN", "p", "1"}, {"ZPOPMAX", "p", "5"}, {"EXISTS", "p"}, {"ZPOPMIN", "p"}, {"ZPOPMAX", "p", "2"},
		{"ZPOPMIN", "p", "-1"}, {"ZPOPMIN", "p", "x"}, {"ZPOPMIN", "p", "1", "2"}, {"ZADD", "p", "1.5", "x"}, {"ZPOPMAX", "p", "1"},
		// ZRANDMEMBER (deterministic cases)
		{"DEL", "rm"}, {"ZADD", "rm", "1", "a", "2", "b", "3", "c"}, {"ZRANDMEMBER", "nosuch"}, {"ZRANDMEMBER", "nosuch", "3"},
		{"ZRANDMEMBER", "rm", "0"}, {"ZRANDMEMBER", "rm", "3"}, {"ZRANDMEMBER", "rm", "10", "WITHSCORES"}, {"ZRANDMEMBER", "rm", "x"},
		{"ZRANDMEMBER", "rm", "1", "BOGUS"}, {"ZRANDMEMBER", "rm", "1", "WITHSCORES", "x"}, {"ZRANDMEMBER", "rm", "-9223372036854775808"},
		{"ZRANDMEMBER", "rm", "-9223372036854775807", "WITHSCORES"}, {"ZRANDMEMBER", "rm", "4611686018427387904", "WITHSCORES"},
		{"ZADD", "one", "7", "only"}, {"ZRANDMEMBER", "one"}, {"ZRANDMEMBER", "one", "-3", "WITHSCORES"}, {"ZRANDMEMBER", "one", "1"},
		// ZUNION, ZINTER, ZDIFF, ZINTERCARD and the STORE forms
		{"DEL", "z1", "z2", "s1"}, {"ZADD", "z1", "1", "a", "2", "b", "3", "c"}, {"ZADD", "z2", "10", "b", "20", "c", "30", "d"},
		{"SADD", "s1", "a", "d", "e"},
		{"ZUNION", "2", "z1", "z2"}, {"ZUNION", "2", "z1", "z2", "WITHSCORES"}, {"ZUNION", "2", "z1", "z2", "WEIGHTS", "2", "0.5", "WITHSCORES"},
		{"ZUNION", "2", "z1", "z2", "AGGREGATE", "MIN", "WITHSCORES"}, {"ZUNION", "2", "z1", "z2", "AGGREGATE", "max", "WITHSCORES"},
		{"ZUNION", "3", "z1", "z2", "s1", "WITHSCORES"}, {"ZUNION", "2", "z1", "nosuch", "WITHSCORES"}, {"ZUNION", "2", "z1", "z1", "WITHSCORES"},
		{"ZUNION", "2", "z1", "z2", "WEIGHTS", "1"}, {"ZUNION", "2", "z1", "z2", "WEIGHTS", "1", "x"}, {"ZUNION", "2", "z1", "z2", "AGGREGATE", "avg"},
		{"ZUNION", "2", "z1", "z2", "AGGREGATE"}, {"ZUNION", "0", "z1"}, {"ZUNION", "-1", "z1"}, {"ZUNION", "3", "z1", "z2"},
		{"ZUNION", "x", "z1"}, {"ZUNION", "2", "z1", "str"}, {"ZUNION", "2", "str", "z1", "BOGUS"}, {"ZUNION", "1", "z1", "BOGUS"},
		{"ZUNION", "2", "z1", "z2", "WEIGHTS", "inf", "-inf", "WITHSCORES"}, {"ZUNION", "2", "z1", "z2", "WEIGHTS", "0", "inf", "WITHSCORES"},
		{"ZINTER", "2", "z1", "z2"}, {"ZINTER", "2", "z1", "z2", "WITHSCORES"}, {"ZINTER", "2", "z1", "z2", "WEIGHTS", "3", "1", "AGGREGATE", "MAX", "WITHSCORES"},
		{"ZINTER", "2", "z1", "s1", "WITHSCORES"}, {"ZINTER", "2", "z1", "nosuch"}, {"ZINTER", "1", "s1", "WITHSCORES"},
		{"ZDIFF", "2", "z1", "z2"}, {"ZDIFF", "2", "z1", "z2", "WITHSCORES"}, {"ZDIFF", "2", "z1", "s1", "WITHSCORES"}, {"ZDIFF", "1", "nosuch"},
		{"ZDIFF", "2", "z1", "z1"}, {"ZDIFF", "2", "z1", "z2", "WEIGHTS", "1", "1"}, {"ZDIFF", "2", "z1", "z2", "AGGREGATE", "SUM"},
		{"ZINTERCARD", "2", "z1", "z2"}, {"ZINTERCARD", "2", "z1", "z2", "LIMIT", "1"}, {"ZINTERCARD", "2", "z1", "z2", "LIMIT", "0"},
		{"ZINTERCARD", "2", "z1", "z2", "LIMIT", "-1"}, {"ZINTERCARD", "2", "z1", "z2", "LIMIT", "x"}, {"ZINTERCARD", "2", "z1", "z2", "WITHSCORES"},
		{"ZINTERCARD", "0", "z1"}, {"ZINTERCARD", "2", "z1", "s1"}, {"ZINTERCARD", "1", "nosuch"},
		{"ZUNIONSTORE", "out", "2", "z1", "z2"}, {"ZRANGE", "out", "0", "-1", "WITHSCORES"}, {"ZINTERSTORE", "out", "2", "z1", "z2", "WEIGHTS", "2", "3"},
		{"ZRANGE", "out", "0", "-1", "WITHSCORES"}, {"ZDIFFSTORE", "out", "2", "z1", "z2"}, {"ZRANGE", "out", "0", "-1", "WITHSCORES"},
		{"ZINTERSTORE", "out", "2", "z1", "nosuch"}, {"EXISTS", "out"}, {"ZUNIONSTORE", "out", "2", "z1", "z2", "WITHSCORES"},
		{"ZUNIONSTORE", "str", "1", "z1"}, {"TYPE", "str"}, {"ZUNIONSTORE", "z1", "2", "z1", "z2"}, {"ZRANGE", "z1", "0", "-1", "WITHSCORES"},
		{"ZDIFFSTORE", "out", "0", "z1"}, {"ZUNIONSTORE", "out", "1"},
		// ZSCAN of a small set: everything at once, cursor 0
		{"DEL", "sc"}, {"ZADD", "sc", "1", "one", "2.5", "two", "-0", "zero", "1e20", "big", "123456789012345678", "long", "inf", "top"},
		{"ZSCAN", "sc", "0"}, {"ZSCAN", "sc", "0", "MATCH", "t*"}, {"ZSCAN", "sc", "0", "COUNT", "1"}, {"ZSCAN", "sc", "0", "COUNT", "0"},
		{"ZSCAN", "sc", "0", "COUNT", "x"}, {"ZSCAN", "sc", "x"}, {"ZSCAN", "sc", "-1"}, {"ZSCAN", "sc", " 0"}, {"ZSCAN", "sc", "0", "BOGUS"},
		{"ZSCAN", "sc", "0", "TYPE", "zset"}, {"ZSCAN", "nosuch", "0"}, {"ZSCAN", "nosuch", "0", "BOGUS"}, {"ZSCAN", "nosuch", "x"},
		{"ZSCAN", "sc", "18446744073709551616"}, {"ZSCAN", "str", "0"},
		// number and range syntax corners: strtod's forms, C strings
		{"DEL", "f"}, {"ZADD", "f", "0x1p-2", "a", "-.5", "b", "+.5e1", "c", "INFINITY", "d", "-iNf", "e", "1E2", "g", "007", "h"},
		{"ZRANGE", "f", "0", "-1", "WITHSCORES"}, {"ZADD", "f", "0x", "x"}, {"ZADD", "f", "1e", "x"}, {"ZADD", "f", "1e+", "x"},
		{"ZADD", "f", "1_000", "x"}, {"ZADD", "f", "0x1p", "x"}, {"ZADD", "f", "1\x00", "x"}, {"ZADD", "f", "1\x001", "x"},
		{"ZADD", "f", "infinit", "x"}, {"ZADD", "f", "-nan", "x"}, {"ZADD", "f", "0x1P-1074", "tiny"}, {"ZADD", "f", "4.9e-325", "x"},
		{"ZSCORE", "f", "tiny"}, {"ZCOUNT", "f", "1\x00junk", "+inf"}, {"ZCOUNT", "f", "(0x1p-3", "0X.8P1"}, {"ZCOUNT", "f", "\t(1", "2"},
		{"ZCOUNT", "f", "(\t1", "2"}, {"ZCOUNT", "f", "\v1", "2"}, {"ZCOUNT", "f", "1e", "2"}, {"ZCOUNT", "f", "-nan", "2"},
		{"ZCOUNT", "f", "(nan", "2"}, {"ZCOUNT", "f", "(-INF", "(+Infinity"}, {"ZCOUNT", "f", "1e309", "-1e309"},
		{"ZRANGEBYLEX", "lex", "+\x00x", "-"}, {"ZRANGEBYLEX", "lex", "-\x00", "+"}, {"ZRANGEBYLEX", "lex", "[\x00", "+"},
		{"ZRANGEBYLEX", "lex", "", "+"}, {"ZRANGEBYLEX", "lex", "(", "+"}, {"ZRANGEBYLEX", "lex", "-", "["}, {"ZRANGEBYLEX", "lex", "-", "("},
		{"ZSCAN", "sc", "+0"}, {"ZSCAN", "sc", ""}, {"ZSCAN", "sc", "0\x00x"}, {"ZSCAN", "sc", "-0"}, {"ZSCAN", "sc", "+"}, {"ZSCAN", "sc", "00"},
		{"DEL", "nz"}, {"ZADD", "nz", "inf", "m", "-inf", "n", "1", "o"}, {"ZINCRBY", "nz", "-inf", "m"}, {"ZADD", "nz", "INCR", "inf", "n"},
		{"ZADD", "nz2", "-inf", "m", "inf", "n"}, {"ZUNION", "2", "nz", "nz2", "WITHSCORES"},
		{"ZUNION", "2", "nz", "nz2", "WEIGHTS", "0", "1", "WITHSCORES"}, {"ZINTER", "2", "nz", "nz2", "AGGREGATE", "MIN", "WITHSCORES"},
		{"ZINTERSTORE", "nzout", "2", "nz", "nz2"}, {"ZRANGE", "nzout", "0", "-1", "WITHSCORES"},
		{"ZADD", "sums", "0.1", "a"}, {"ZADD", "sums2", "0.2", "a"}, {"ZADD", "sums3", "0.3", "a"},
		{"ZUNION", "3", "sums", "sums2", "sums3", "WITHSCORES"}, {"ZINTER", "3", "sums3", "sums2", "sums", "WITHSCORES"},
		{"ZUNION", "3", "sums", "sums2", "sums3", "WEIGHTS", "3", "1e-17", "7", "WITHSCORES"},
		// wrong types, both ways
		{"SET", "str", "v"}, {"ZADD", "str", "1", "a"}, {"ZADD", "str", "x", "a"}, {"ZINCRBY", "str", "1", "a"}, {"ZREM", "str", "a"},
		{"ZCARD", "str"}, {"ZSCORE", "str", "a"}, {"ZMSCORE", "str", "a"}, {"ZRANK", "str", "a"}, {"ZREVRANK", "str", "a"},
		{"ZCOUNT", "str", "0", "1"}, {"ZCOUNT", "str", "x", "1"}, {"ZLEXCOUNT", "str", "-", "+"}, {"ZRANGE", "str", "0", "-1"},
		{"ZRANGE", "str", "x", "-1"}, {"ZRANGEBYSCORE", "str", "0", "1"}, {"ZRANGEBYLEX", "str", "-", "+"}, {"ZREVRANGE", "str", "0", "1"},
		{"ZREMRANGEBYRANK", "str", "0", "1"}, {"ZREMRANGEBYSCORE", "str", "0", "1"}, {"ZREMRANGEBYLEX", "str", "-", "+"},
		{"ZPOPMIN", "str"}, {"ZPOPMAX", "str", "2"}, {"ZRANDMEMBER", "str"}, {"ZRANDMEMBER", "str", "2"}, {"ZINTERCARD", "1", "str"},
		{"ZDIFF", "1", "str"}, {"ZINTER", "2", "z2", "str"}, {"GET", "z2"}, {"LPUSH", "z2", "x"}, {"SADD", "z2", "x"}, {"HSET", "z2", "f", "v"},
		{"TYPE", "z2"}, {"SCAN", "0", "TYPE", "zset", "MATCH", "z2", "COUNT", "1000"},
		{"SCAN", "0", "TYPE", "zset", "MATCH", "str", "COUNT", "1000"},
		{"ZADD", "mv", "1", "a"}, {"RENAME", "mv", "mv2"}, {"ZRANGE", "mv2", "0", "-1", "WITHSCORES"}, {"EXPIRE", "mv2", "100"}, {"TTL", "mv2"},
		{"ZADD", "mv2", "2", "b"}, {"TTL", "mv2"}, {"ZUNIONSTORE", "mv2", "1", "mv2"}, {"TTL", "mv2"},
		// OBJECT ENCODING follows Redis's one-way listpack→skiplist switch
		{"DEL", "enc"}, {"ZADD", "enc", "1", "a"}, {"OBJECT", "ENCODING", "enc"}, {"ZADD", "enc", "1", "0123456789012345678901234567890123456789012345678901234567890123"},
		{"OBJECT", "ENCODING", "enc"}, {"ZADD", "enc", "1", "01234567890123456789012345678901234567890123456789012345678901234"},
		{"OBJECT", "ENCODING", "enc"}, {"ZREM", "enc", "01234567890123456789012345678901234567890123456789012345678901234"},
		{"OBJECT", "ENCODING", "enc"}, {"ZUNIONSTORE", "enc2", "1", "enc"}, {"OBJECT", "ENCODING", "enc2"},
		{"ZADD", "enc3", "1", "01234567890123456789012345678901234567890123456789012345678901234"}, {"OBJECT", "ENCODING", "enc3"},
		{"OBJECT", "ENCODING", "nosuch"}, {"OBJECT", "ENCODING"}, {"OBJECT", "ENCODING", "a", "b"}, {"OBJECT", "BOGUS", "x"}, {"OBJECT"},
		{"OBJECT", "HELP"}, {"OBJECT", "FREQ", "enc"}, {"OBJECT", "REFCOUNT", "enc"}, {"OBJECT", "REFCOUNT", "nosuch"},
		{"SET", "oi", "123"}, {"SET", "ob", "10001"}, {"SET", "oe", "abc"}, {"SET", "or", "0123456789012345678901234567890123456789012345"},
		{"SET", "on", "-0"}, {"RPUSH", "ol", "a"}, {"SADD", "osi", "1", "2"}, {"SADD", "oss", "a"}, {"HSET", "oh", "f", "v"},
		{"OBJECT", "ENCODING", "oi"}, {"OBJECT", "ENCODING", "ob"}, {"OBJECT", "ENCODING", "oe"}, {"OBJECT", "ENCODING", "or"},
		{"OBJECT", "ENCODING", "on"}, {"OBJECT", "ENCODING", "ol"}, {"OBJECT", "ENCODING", "osi"}, {"OBJECT", "ENCODING", "oss"},
		{"OBJECT", "ENCODING", "oh"}, {"OBJECT", "REFCOUNT", "oi"}, {"OBJECT", "REFCOUNT", "ob"}, {"OBJECT", "REFCOUNT", "oe"},
		// arity
		{"ZADD", "z"}, {"ZINCRBY", "z", "1"}, {"ZREM", "z"}, {"ZCARD"}, {"ZSCORE", "z"}, {"ZRANK", "z"}, {"ZCOUNT", "z", "1"},
		{"ZRANGE", "z", "0"}, {"ZRANGESTORE", "d", "z", "0"}, {"ZPOPMIN"}, {"ZUNION", "1"}, {"ZUNIONSTORE", "d", "1"}, {"ZSCAN", "z"},
		{"ZINTERCARD", "1"}, {"ZMSCORE", "z"}, {"ZRANDMEMBER"}, {"ZREMRANGEBYRANK", "z", "0"},
	}
	// Two sets past 128 members, which Redis keeps as skip lists: ties,
	// ranks from both ends, ranges and removals over the bigger structure.
	for i := range 300 {
		s = append(s, []any{"ZADD", "big", i % 37, fmt.Sprintf("m%03d", i)})
	}
	for i := range 150 {
		s = append(s, []any{"ZADD", "lexbig", 0, fmt.Sprintf("k%03d", (i*7)%150)})
	}
	s = append(s, [][]any{
		{"ZCARD", "big"}, {"ZRANGE", "big", "0", "9", "WITHSCORES"}, {"ZRANGE", "big", "-5", "-1", "REV", "WITHSCORES"},
		{"ZRANK", "big", "m100"}, {"ZREVRANK", "big", "m100"}, {"ZRANK", "big", "m299"}, {"ZCOUNT", "big", "(5", "10"},
		{"ZRANGEBYSCORE", "big", "30", "+inf", "WITHSCORES", "LIMIT", "5", "7"}, {"ZREVRANGEBYSCORE", "big", "(20", "18", "LIMIT", "3", "4"},
		{"ZINCRBY", "big", "100", "m007"}, {"ZRANGE", "big", "-2", "-1", "WITHSCORES"}, {"ZADD", "big", "-5", "m299"}, {"ZRANGE", "big", "0", "1"},
		{"ZREMRANGEBYRANK", "big", "10", "40"}, {"ZREMRANGEBYSCORE", "big", "(30", "33"}, {"ZCARD", "big"},
		{"ZRANGE", "big", "100", "130", "WITHSCORES"}, {"ZPOPMIN", "big", "3"}, {"ZPOPMAX", "big", "2"}, {"ZSCORE", "big", "m150"},
		{"ZRANDMEMBER", "big", "1000", "WITHSCORES"},
		{"ZLEXCOUNT", "lexbig", "[k010", "(k100"}, {"ZRANGEBYLEX", "lexbig", "(k140", "+"}, {"ZREVRANGEBYLEX", "lexbig", "[k020", "-", "LIMIT", "2", "3"},
		{"ZREMRANGEBYLEX", "lexbig", "[k050", "[k099"}, {"ZCARD", "lexbig"}, {"ZRANGE", "lexbig", "45", "55"},
		{"ZUNIONSTORE", "bigout", "2", "big", "z2", "AGGREGATE", "MAX"}, {"ZRANGE", "bigout", "0", "-1", "WITHSCORES"},
		{"ZINTERSTORE", "bigout", "2", "big", "big", "WEIGHTS", "0.5", "0.25"}, {"ZRANGE", "bigout", "0", "-1", "WITHSCORES"},
		{"ZDIFF", "2", "big", "bigout"}, {"ZINTERCARD", "2", "big", "bigout", "LIMIT", "100"},
		{"ZRANGESTORE", "bigout", "big", "0", "200"}, {"ZCARD", "bigout"}, {"OBJECT", "ENCODING", "big"}, {"OBJECT", "ENCODING", "bigout"},
		{"ZRANGESTORE", "bigout", "big", "0", "127"}, {"OBJECT", "ENCODING", "bigout"}, {"ZREMRANGEBYRANK", "big", "0", "-3"},
		{"OBJECT", "ENCODING", "big"}, {"ZUNIONSTORE", "bigout", "1", "big"}, {"OBJECT", "ENCODING", "bigout"},
	}...)
	return s
}()

// TestZsetConformanceWithRedisServer runs zsetScript against cachenode and
// redis-server and requires identical replies, in RESP2 and RESP3.
func TestZsetConformanceWithRedisServer(t *testing.T) {
	conformance(t, zsetScript, nil, 2, 3)
}

// randomZsetScript is a reproducible random mix of sorted-set commands
// over a few keys, members from a pool of 200 (so sets pass Redis's
// listpack size and shrink back) and scores from a small pool (ties,
// infinities, fractions). Lex commands only touch a key whose scores are
// all 0: on mixed scores Redis's lex walk depends on its skip list's
// random levels.
func randomZsetScript(seed uint64, n int) [][]any {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	keys := []string{"ra", "rb", "rc", "rd"}
	key := func() string { return keys[r.IntN(len(keys))] }
	member := func() string { return fmt.Sprintf("m%03d", r.IntN(200)) }
	scores := []string{"-inf", "+inf", "0", "-0", "0.1", "0.2", "1.5", "-3", "7", "1e20", "-2.25", "100"}
	score := func() string {
		if r.IntN(3) == 0 {
			return scores[r.IntN(len(scores))]
		}
		return strconv.Itoa(r.IntN(40) - 10)
	}
	bound := func() string {
		b := score()
		if r.IntN(3) == 0 {
			b = "(" + b
		}
		return b
	}
	lexBound := func() string {
		switch r.IntN(6) {
		case 0:
			return "-"
		case 1:
			return "+"
		case 2:
			return "(" + member()
		}
		return "[" + member()
	}
	idx := func() string { return strconv.Itoa(r.IntN(260) - 130) }
	var s [][]any
	add := func(a ...any) { s = append(s, a) }
	for len(s) < n {
		k := key()
		switch r.IntN(24) {
		case 0, 1, 2, 3:
			a := []any{"ZADD", k}
			for _, o := range []string{"NX", "XX", "GT", "LT", "CH"} {
				if r.IntN(6) == 0 {
					a = append(a, o)
				}
			}
			pairs := r.IntN(6) + 1
			if r.IntN(5) == 0 {
				a, pairs = append(a, "INCR"), 1
			}
			for range pairs {
				a = append(a, score(), member())
			}
			add(a...)
		case 4:
			a := []any{"ZADD", "rl"}
			for range r.IntN(8) + 1 {
				a = append(a, "0", member())
			}
			add(a...)
		case 5:
			add("ZINCRBY", k, score(), member())
		case 6:
			add("ZREM", k, member(), member())
		case 7:
			by := r.IntN(3)
			a := []any{"ZRANGE", k, idx(), idx()}
			switch by {
			case 1:
				a = []any{"ZRANGE", k, bound(), bound(), "BYSCORE"}
			case 2:
				a = []any{"ZRANGE", "rl", lexBound(), lexBound(), "BYLEX"}
			}
			if r.IntN(2) == 0 {
				a = append(a, "REV")
			}
			if by != 2 && r.IntN(2) == 0 {
				a = append(a, "WITHSCORES")
			}
			if by != 0 && r.IntN(2) == 0 {
				a = append(a, "LIMIT", strconv.Itoa(r.IntN(12)-1), strconv.Itoa(r.IntN(12)-2))
			}
			add(a...)
		case 8:
			add("ZRANGEBYSCORE", k, bound(), bound(), "WITHSCORES", "LIMIT", strconv.Itoa(r.IntN(20)), strconv.Itoa(r.IntN(20)-1))
		case 9:
			add("ZREVRANGEBYSCORE", k, bound(), bound())
		case 10:
			add("ZCOUNT", k, bound(), bound())
		case 11:
			add("ZRANK", k, member())
			add("ZREVRANK", k, member())
			add("ZSCORE", k, member())
		case 12:
			add("ZMSCORE", k, member(), member(), member())
			add("ZCARD", k)
		case 13:
			add("ZREMRANGEBYRANK", k, idx(), idx())
		case 14:
			add("ZREMRANGEBYSCORE", k, bound(), bound())
		case 15:
			add("ZPOPMIN", k, strconv.Itoa(r.IntN(4)))
			add("ZPOPMAX", k)
		case 16:
			op := []string{"ZUNION", "ZINTER", "ZDIFF"}[r.IntN(3)]
			a := []any{op, "3", key(), key(), key()}
			if op != "ZDIFF" && r.IntN(2) == 0 {
				a = append(a, "WEIGHTS", score(), "2", "0.5")
			}
			if op != "ZDIFF" && r.IntN(2) == 0 {
				a = append(a, "AGGREGATE", []string{"SUM", "MIN", "MAX"}[r.IntN(3)])
			}
			add(append(a, "WITHSCORES")...)
		case 17:
			op := []string{"ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE"}[r.IntN(3)]
			a := []any{op, key(), "2", key(), key()}
			if op != "ZDIFFSTORE" && r.IntN(2) == 0 {
				a = append(a, "WEIGHTS", "2", score())
			}
			add(a...)
			add("ZRANGE", a[1], "0", "-1", "WITHSCORES")
		case 18:
			add("ZINTERCARD", "2", key(), key(), "LIMIT", strconv.Itoa(r.IntN(5)))
		case 19:
			add("ZRANGESTORE", key(), k, bound(), bound(), "BYSCORE", "LIMIT", "1", strconv.Itoa(r.IntN(150)))
		case 20:
			add("ZRANGEBYLEX", "rl", lexBound(), lexBound())
			add("ZREVRANGEBYLEX", "rl", lexBound(), lexBound(), "LIMIT", strconv.Itoa(r.IntN(5)), strconv.Itoa(r.IntN(5)))
			add("ZLEXCOUNT", "rl", lexBound(), lexBound())
		case 21:
			add("ZREMRANGEBYLEX", "rl", lexBound(), lexBound())
		case 22:
			add("ZRANDMEMBER", k, "1000", "WITHSCORES")
		default:
			add("ZRANGE", k, "0", "-1", "WITHSCORES")
		}
	}
	return s
}

// TestZsetRandomConformance runs a random sorted-set workload (fixed seed;
// PORTICO_ZSET_RANDOM_SEEDS and _COMMANDS widen it) against cachenode and
// redis-server and requires identical replies.
func TestZsetRandomConformance(t *testing.T) {
	seeds, n := envInt("PORTICO_ZSET_RANDOM_SEEDS", 1), envInt("PORTICO_ZSET_RANDOM_COMMANDS", 3000)
	for seed := range seeds {
		conformance(t, randomZsetScript(uint64(seed+1), n), nil, 3)
	}
}
