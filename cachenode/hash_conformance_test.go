package cachenode_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// hashOrderScript covers small hashes, which Redis keeps as listpacks and
// cachenode packs (keyspace/hashpack.go): replies list fields in the
// order they were added, an update keeps a field's place, a field deleted
// and added again goes last; OBJECT ENCODING turns "hashtable" on the
// first field or value over 64 bytes or field past 512, and stays so.
// Compared in order (no reply is sorted before comparing).
var hashOrderScript = func() [][]any {
	v64, v65 := strings.Repeat("v", 64), strings.Repeat("v", 65)
	s := [][]any{
		{"HSET", "h", "zeta", "1", "alpha", "2", "mid", "3"}, {"HKEYS", "h"}, {"HVALS", "h"}, {"HGETALL", "h"},
		{"HSCAN", "h", "0"}, {"HSCAN", "h", "0", "COUNT", "1"}, {"HSCAN", "h", "0", "MATCH", "*a"},
		{"HSET", "h", "alpha", "22"}, {"HKEYS", "h"}, {"HVALS", "h"}, {"HDEL", "h", "zeta"}, {"HSET", "h", "zeta", "9"},
		{"HGETALL", "h"}, {"HINCRBY", "h", "mid", "5"}, {"HINCRBY", "h", "n", "-1"}, {"HGETALL", "h"}, {"OBJECT", "ENCODING", "h"},
		{"HSET", "h", "", "empty field"}, {"HSET", "h", "empty value", ""}, {"HGET", "h", ""}, {"HGET", "h", "empty value"},
		{"HGETALL", "h"}, {"HLEN", "h"},
		// values and fields at and past 64 bytes
		{"HSET", "v", "f", v64}, {"OBJECT", "ENCODING", "v"}, {"HSET", "v", "f", v65}, {"OBJECT", "ENCODING", "v"},
		{"HSET", "v", "f", "short"}, {"OBJECT", "ENCODING", "v"}, {"HGET", "v", "f"},
		{"HSET", "fl", v64, "x"}, {"OBJECT", "ENCODING", "fl"}, {"HSET", "fl", v65, "x"}, {"OBJECT", "ENCODING", "fl"},
		{"HDEL", "fl", v65}, {"OBJECT", "ENCODING", "fl"}, {"HGET", "fl", v64},
		{"HINCRBY", "inc", "c", "1"}, {"OBJECT", "ENCODING", "inc"},
		{"HDEL", "h", "alpha", "mid", "zeta", "n", "", "empty value"}, {"EXISTS", "h"},
	}
	// Up to 128 fields: packed here, a listpack there, the same order.
	// Past 128 cachenode keeps a map (its order is sorted, Redis's the
	// listpack's: not compared) while OBJECT ENCODING follows Redis: a
	// listpack to 512 fields, a hash table from the 513th, for good.
	for i := range 128 {
		s = append(s, []any{"HSET", "big", fmt.Sprintf("f%03d", (i*37)%128), i})
	}
	s = append(s, [][]any{{"OBJECT", "ENCODING", "big"}, {"HLEN", "big"}, {"HKEYS", "big"}, {"HSCAN", "big", "0", "COUNT", "10"},
		{"HSET", "big", "one more", "x"}, {"OBJECT", "ENCODING", "big"}, {"HDEL", "big", "one more"}, {"OBJECT", "ENCODING", "big"}}...)
	for i := 128; i < 512; i++ {
		s = append(s, []any{"HSET", "big", fmt.Sprintf("f%03d", i), i})
	}
	s = append(s, [][]any{{"OBJECT", "ENCODING", "big"}, {"HLEN", "big"}, {"HSET", "big", "the 513th", "x"}, {"OBJECT", "ENCODING", "big"},
		{"HDEL", "big", "the 513th", "f000", "f001"}, {"OBJECT", "ENCODING", "big"}, {"HLEN", "big"}, {"HGET", "big", "f077"}}...)
	return s
}()

// TestHashOrderConformanceWithRedisServer runs hashOrderScript against
// cachenode and redis-server and requires identical replies, in RESP2 and
// RESP3.
func TestHashOrderConformanceWithRedisServer(t *testing.T) {
	conformance(t, hashOrderScript, nil, 2, 3)
}

// TestHScanListpackComesWhole: a hash Redis holds as a listpack (here 200
// fields: past cachenode's 128-field pack, within Redis's 512) comes
// whole from one HSCAN, whatever the cursor and COUNT, with cursor 0, on
// both servers; past 512 fields both page it.
func TestHScanListpackComesWhole(t *testing.T) {
	n := startNode(t)
	servers := map[string]*redis.Client{
		"cachenode":    n.client(t),
		"redis-server": redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + startRedisServer(t)}),
	}
	for name, c := range servers {
		for _, size := range []int{200, 600} {
			key := fmt.Sprint("h", size)
			fields := make([]any, 0, 2*size)
			for i := range size {
				fields = append(fields, fmt.Sprintf("f%03d", i), i)
			}
			if err := c.HSet(ctx(t), key, fields...).Err(); err != nil {
				t.Fatal(err)
			}
			for _, cur := range []uint64{0, 17} {
				kv, next, err := c.HScan(ctx(t), key, cur, "", 10).Result()
				if err != nil {
					t.Fatal(err)
				}
				whole := next == 0 && len(kv) == 2*size
				if want := size <= 512; whole != want {
					t.Errorf("%s: HSCAN %s %d COUNT 10 over %d fields: %d elements, cursor %d (whole: %v, want %v)",
						name, key, cur, size, len(kv), next, whole, want)
				}
			}
		}
	}
}
