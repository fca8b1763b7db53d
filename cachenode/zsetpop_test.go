package cachenode_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/internal/xdstest"
)

// zpopScript: ZMPOP, BZMPOP, BZPOPMIN and BZPOPMAX where they answer at
// once (data present, MULTI, or a timeout short enough to pass in the
// script), with their argument errors in Redis's order and WRONGTYPE on
// the first existing key of another type.
var zpopScript = [][]any{
	{"ZADD", "z1", "1", "a", "2", "b", "3", "c", "4", "d"}, {"ZADD", "z2", "-1", "x", "5", "y"},
	{"ZMPOP", "1", "z1", "MIN"}, {"ZMPOP", "2", "nosuch", "z1", "MAX"}, {"ZMPOP", "2", "z1", "z2", "MIN", "COUNT", "2"},
	{"ZMPOP", "1", "z1", "MAX", "COUNT", "10"}, {"EXISTS", "z1"}, {"ZMPOP", "1", "z1", "MIN"}, {"ZMPOP", "2", "nosuch", "z1", "MIN"},
	{"ZMPOP", "0", "z1", "MIN"}, {"ZMPOP", "-1", "z1", "MIN"}, {"ZMPOP", "x", "z1", "MIN"}, {"ZMPOP", "3", "z1", "MIN"},
	{"ZMPOP", "1", "z2", "BOGUS"}, {"ZMPOP", "1", "z2", "MIN", "COUNT"}, {"ZMPOP", "1", "z2", "MIN", "COUNT", "0"},
	{"ZMPOP", "1", "z2", "MIN", "COUNT", "-2"}, {"ZMPOP", "1", "z2", "MIN", "COUNT", "x"}, {"ZMPOP", "1", "z2", "MIN", "COUNT", "1", "COUNT", "1"},
	{"ZMPOP", "1", "z2", "max", "count", "1", "extra"}, {"ZMPOP", "1", "z2"}, {"ZMPOP", "1"},
	{"SET", "str", "v"}, {"LPUSH", "lst", "e"}, {"ZMPOP", "2", "str", "z2", "MIN"}, {"ZMPOP", "2", "nosuch", "lst", "MIN"},
	{"ZMPOP", "2", "z2", "str", "MIN"},
	// BZPOPMIN / BZPOPMAX
	{"ZADD", "bz", "1", "a", "2", "b", "3", "c"}, {"BZPOPMIN", "bz", "0"}, {"BZPOPMAX", "nosuch", "bz", "0"},
	{"BZPOPMIN", "nosuch", "bz", "1"}, {"EXISTS", "bz"}, {"BZPOPMIN", "bz", "0.01"}, {"BZPOPMAX", "bz", "nosuch", "0.01"},
	{"BZPOPMIN", "str", "0"}, {"BZPOPMIN", "nosuch", "lst", "0"}, {"BZPOPMIN", "bz", "-1"}, {"BZPOPMIN", "bz", "x"},
	{"BZPOPMIN", "bz", "inf"}, {"BZPOPMIN", "bz"}, {"BZPOPMAX", "bz"}, {"BZPOPMIN", "bz", "0x0.0001"},
	{"ZADD", "bz", "-inf", "lo", "+inf", "hi", "0.5", "mid"}, {"BZPOPMIN", "bz", "0"}, {"BZPOPMAX", "bz", "0"}, {"BZPOPMAX", "bz", "0"},
	// BZMPOP
	{"ZADD", "bm", "1", "a", "2", "b", "3", "c"}, {"BZMPOP", "0", "1", "bm", "MIN"}, {"BZMPOP", "0", "2", "nosuch", "bm", "MAX", "COUNT", "5"},
	{"BZMPOP", "0.01", "1", "bm", "MIN"}, {"BZMPOP", "0.01", "2", "bm", "nosuch", "MAX", "COUNT", "3"},
	{"BZMPOP", "x", "1", "bm", "MIN"}, {"BZMPOP", "-1", "1", "bm", "MIN"}, {"BZMPOP", "x", "0", "bm", "MIN"},
	{"BZMPOP", "x", "1", "bm", "BOGUS"}, {"BZMPOP", "x", "1", "bm", "MIN", "COUNT", "0"}, {"BZMPOP", "0", "0", "bm", "MIN"},
	{"BZMPOP", "0", "5", "bm", "MIN"}, {"BZMPOP", "0", "1", "bm", "MIN", "COUNT"}, {"BZMPOP", "0", "1", "str", "MIN"},
	{"BZMPOP", "0", "1", "bm"}, {"BZMPOP", "0", "1"},
	// Inside MULTI nothing blocks: a null array at once.
	{"MULTI"}, {"BZPOPMIN", "empty", "0"}, {"BZMPOP", "0", "1", "empty", "MAX"}, {"ZADD", "empty", "7", "m"}, {"BZPOPMAX", "empty", "0"}, {"EXEC"},
	{"COMMAND", "GETKEYS", "ZMPOP", "2", "k1", "k2", "MIN"}, {"COMMAND", "GETKEYS", "BZMPOP", "0", "2", "k1", "k2", "MIN"},
	{"COMMAND", "GETKEYS", "BZPOPMIN", "k1", "k2", "0"},
}

func TestZsetPopsConformWithRedisServer(t *testing.T) {
	conformance(t, zpopScript, nil, 2, 3)
}

// blockingScenario is a sequence of steps on several raw connections to
// one server; run returns the transcript of the replies read, which must
// be the same for cachenode and redis-server.
type blockingStep struct {
	conn    int      // which connection
	args    []string // sent; nil: only read
	read    bool     // read one reply (after sending, if args)
	blocked int      // then wait until INFO counts this many blocked clients (-1: do not wait)
}

func runBlockingScenario(t *testing.T, addr string, conns, proto int, steps []blockingStep) []string {
	t.Helper()
	cs := make([]*rawConn, conns)
	ids := map[string]string{} // "{id:N}" in a step's arguments: connection N's CLIENT ID
	for i := range cs {
		cs[i] = dialRaw(t, addr)
		if proto == 3 {
			cs[i].do(t, "HELLO", "3")
		}
		id := strings.TrimSuffix(strings.TrimPrefix(cs[i].do(t, "CLIENT", "ID"), ":"), "\r\n")
		ids[fmt.Sprintf("{id:%d}", i)] = id
	}
	admin := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer admin.Close()
	var out []string
	for i, s := range steps {
		if s.args != nil {
			args := make([]string, len(s.args))
			for j, a := range s.args {
				if id, ok := ids[a]; ok {
					a = id
				}
				args[j] = a
			}
			cs[s.conn].send(t, args...)
		}
		if s.read {
			out = append(out, fmt.Sprintf("%d %v -> %q", i, s.args, cs[s.conn].read(t, 10*time.Second)))
		}
		if s.blocked >= 0 {
			xdstest.Eventually(t, 10*time.Second, fmt.Sprintf("%s: %d blocked clients after step %d %v", addr, s.blocked, i, s.args),
				func() bool { return blockedClients(t, admin) == s.blocked })
		}
	}
	return out
}

// TestBlockingZsetConformWithRedisServer runs blocking scenarios on
// cachenode and on redis-server and requires the same replies: waiters
// served in arrival order by ZADD (one member each, the rest kept), by a
// ZADD inside EXEC, by ZUNIONSTORE and RENAME into the awaited key;
// BZMPOP's COUNT; a list waiter and a sorted-set waiter on one key (each
// is served only by its own type); CLIENT UNBLOCK; RESP2 and RESP3.
func TestBlockingZsetConformWithRedisServer(t *testing.T) {
	n := startNode(t)
	theirs := "127.0.0.1:" + startRedisServer(t)
	do := func(conn int, args ...string) blockingStep {
		return blockingStep{conn: conn, args: args, read: true, blocked: -1}
	}
	block := func(conn, blocked int, args ...string) blockingStep {
		return blockingStep{conn: conn, args: args, blocked: blocked}
	}
	read := func(conn int) blockingStep { return blockingStep{conn: conn, read: true, blocked: -1} }
	steps := []blockingStep{
		do(0, "FLUSHALL"),
		// FIFO: three waiters, one ZADD of two members serves the two oldest.
		block(1, 1, "BZPOPMIN", "zq", "other", "0"),
		block(2, 2, "BZPOPMAX", "other", "zq", "0"),
		block(3, 3, "BZMPOP", "0", "2", "zq", "other", "MIN", "COUNT", "5"),
		do(0, "ZADD", "zq", "1", "a", "2", "b"),
		read(1), read(2),
		block(0, 1, "PING"), read(0),
		do(0, "ZADD", "zq", "5", "c", "3", "d", "4", "e"), read(3),
		do(0, "EXISTS", "zq"),
		// A ZADD inside EXEC serves the waiter after EXEC, with what the
		// transaction left.
		block(1, 1, "BZPOPMAX", "tx", "0"),
		do(0, "MULTI"), do(0, "ZADD", "tx", "1", "x", "9", "y", "5", "z"), do(0, "ZPOPMAX", "tx"), do(0, "EXEC"),
		read(1), do(0, "ZRANGE", "tx", "0", "-1", "WITHSCORES"),
		// A store into the awaited key, and a rename onto it.
		block(1, 1, "BZPOPMIN", "dst", "0"),
		do(0, "ZADD", "src1", "3", "p", "4", "q"), do(0, "ZUNIONSTORE", "dst", "1", "src1"), read(1),
		do(0, "DEL", "dst"), block(2, 1, "BZMPOP", "0", "1", "dst", "MAX", "COUNT", "2"),
		do(0, "ZADD", "src2", "7", "r", "8", "s", "9", "t"), do(0, "RENAME", "src2", "dst"), read(2),
		do(0, "ZRANGE", "dst", "0", "-1"),
		// A list waiter and a sorted-set waiter on one key: each type
		// serves its own waiter, the older one of the other type waits on.
		block(1, 1, "BLPOP", "mixed", "0"),
		block(2, 2, "BZPOPMIN", "mixed", "0"),
		do(0, "ZADD", "mixed", "1", "m"), read(2),
		block(0, 1, "PING"), read(0),
		do(0, "RPUSH", "mixed", "l"), read(1),
		// A timeout; WRONGTYPE instead of a wait.
		do(1, "BZPOPMIN", "nothing", "0.05"),
		do(0, "SET", "wrong", "v"), do(1, "BZPOPMIN", "wrong", "0"),
		do(1, "BZPOPMIN", "nosuch", "wrong", "0"), do(0, "DEL", "wrong"),
		block(1, 1, "BZPOPMIN", "nosuch", "wrong", "0"), do(0, "ZADD", "wrong", "2", "w"), read(1),
		// CLIENT UNBLOCK: the timeout's reply, then -UNBLOCKED; 0 for a
		// client that is not blocked; the connection goes on.
		block(1, 1, "BZPOPMIN", "u", "0"), do(0, "CLIENT", "UNBLOCK", "{id:1}"), read(1),
		block(2, 1, "BLMPOP", "0", "1", "u", "LEFT"), do(0, "CLIENT", "UNBLOCK", "{id:2}", "ERROR"), read(2),
		do(0, "CLIENT", "UNBLOCK", "{id:1}"), do(0, "CLIENT", "UNBLOCK", "{id:1}", "error"), do(1, "ZADD", "u", "1", "a"),
		do(0, "CLIENT", "UNBLOCK", "{id:1}", "BOGUS"), do(0, "CLIENT", "UNBLOCK", "x"), do(0, "CLIENT", "UNBLOCK", "{id:1}", "TIMEOUT", "x"),
	}
	for _, proto := range []int{2, 3} {
		ours := runBlockingScenario(t, n.addrs.RESP, 4, proto, steps)
		them := runBlockingScenario(t, theirs, 4, proto, steps)
		if strings.Join(ours, "\n") != strings.Join(them, "\n") {
			for i := range max(len(ours), len(them)) {
				var a, b string
				if i < len(ours) {
					a = ours[i]
				}
				if i < len(them) {
					b = them[i]
				}
				if a != b {
					t.Errorf("RESP%d:\n  cachenode:    %s\n  redis-server: %s", proto, a, b)
				}
			}
		}
		t.Logf("RESP%d: %d replies compared with redis-server", proto, len(ours))
	}
}

// TestBlockingZsetConcurrentPushers: ZADDs race with BZPOPMIN, BZPOPMAX
// and BZMPOP waiters on two keys; every member is popped exactly once and
// nothing is left.
func TestBlockingZsetConcurrentPushers(t *testing.T) {
	n := startNode(t)
	c := n.client(t, func(o *redis.Options) { o.PoolSize = 16 })
	const pushers, poppers, each = 3, 4, 150
	total := pushers * each
	keys := []string{"zc1", "zc2"}
	popped := make(chan string, total)
	errs := make(chan error, pushers+poppers)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for p := range poppers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				var got []string
				var err error
				switch p % 3 {
				case 0:
					var z *redis.ZWithKey
					if z, err = c.BZPopMin(ctx(t), 200*time.Millisecond, keys...).Result(); err == nil {
						got = []string{fmt.Sprint(z.Member)}
					}
				case 1:
					var z *redis.ZWithKey
					if z, err = c.BZPopMax(ctx(t), 200*time.Millisecond, keys...).Result(); err == nil {
						got = []string{fmt.Sprint(z.Member)}
					}
				default:
					var zs []redis.Z
					if _, zs, err = c.BZMPop(ctx(t), 200*time.Millisecond, "min", 3, keys...).Result(); err == nil {
						for _, z := range zs {
							got = append(got, fmt.Sprint(z.Member))
						}
					}
				}
				if errors.Is(err, redis.Nil) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				for _, m := range got {
					popped <- m
				}
			}
		}()
	}
	for p := range pushers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := c.ZAdd(ctx(t), keys[i%2], redis.Z{Score: float64(i), Member: fmt.Sprintf("p%d-%d", p, i)}).Err(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	seen := map[string]int{}
	deadline := time.After(20 * time.Second)
	for range total {
		select {
		case m := <-popped:
			seen[m]++
		case err := <-errs:
			t.Fatal(err)
		case <-deadline:
			t.Fatalf("only %d of %d members popped", len(seen), total)
		}
	}
	close(done)
	wg.Wait()
	if len(seen) != total {
		t.Fatalf("%d distinct members popped, want %d", len(seen), total)
	}
	for m, k := range seen {
		if k != 1 {
			t.Fatalf("%s popped %d times", m, k)
		}
	}
	if n := c.Exists(ctx(t), keys...).Val(); n != 0 {
		t.Fatalf("%d sorted sets left", n)
	}
}
