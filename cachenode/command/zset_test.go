package command

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/portico-io/portico/cachenode/evict"
	"github.com/portico-io/portico/cachenode/keyspace"
	"github.com/portico-io/portico/cachenode/namespace"
	"github.com/portico-io/portico/cachenode/resp"
)

// zsetEngine is a standalone engine over namespaces "default" and any
// given, and a session that runs commands in "default".
func zsetEngine(t *testing.T, extra ...namespace.Settings) (*Engine, *namespace.Registry, func(args ...string) string) {
	t.Helper()
	reg := namespace.NewRegistry(namespace.RegistryConfig{Shards: 4})
	if err := reg.Apply(append([]namespace.Settings{{Name: "default"}}, extra...)); err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	_, exec := session(e)
	return e, reg, exec
}

// bulks decodes a RESP2 flat array of bulk strings (nested arrays are
// flattened).
func bulks(t *testing.T, reply string) []string {
	t.Helper()
	var out []string
	lines := strings.Split(strings.TrimSuffix(reply, "\r\n"), "\r\n")
	for i := 0; i < len(lines); i++ {
		switch l := lines[i]; {
		case strings.HasPrefix(l, "*"):
		case strings.HasPrefix(l, "$"):
			i++
			out = append(out, lines[i])
		default:
			t.Fatalf("unexpected reply line %q in %q", l, reply)
		}
	}
	return out
}

// TestZsetMultiKeyClusterRules: in cluster mode every Z command that names
// several keys (STORE destinations, numkeys lists) routes all of them:
// CROSSSLOT across slots, MOVED for another node's slot, and a bad numkeys
// is the command's own error rather than a routing one.
func TestZsetMultiKeyClusterRules(t *testing.T) {
	e := newFuzzClusterEngine(t) // owns slots 0-8191
	_, exec := session(e)
	mine := func(prefix string) string {
		for i := 0; ; i++ {
			k := fmt.Sprintf("%s%d", prefix, i)
			if keyspace.Slot([]byte(k)) < 8192 {
				return k
			}
		}
	}
	tag := "t"
	for i := 0; keyspace.Slot([]byte("{"+tag+"}")) >= 8192; i++ {
		tag = fmt.Sprintf("t%d", i) // a hash tag of one of our slots
	}
	a, b, c, d := "{"+tag+"}a", "{"+tag+"}b", "{"+tag+"}c", "{"+tag+"}d"
	other := mine("x")
	for other == a || keyspace.Slot([]byte(other)) == keyspace.Slot([]byte(a)) {
		other = mine(other)
	}
	foreign := "foo" // slot 12182, the other node's
	crossslot := "-CROSSSLOT Keys in request don't hash to the same slot\r\n"
	if got := exec("ZADD", a, "1", "m", "2", "n"); got != ":2\r\n" {
		t.Fatal(got)
	}
	if got := exec("ZADD", b, "3", "m"); got != ":1\r\n" {
		t.Fatal(got)
	}
	for _, c := range [][]string{
		{"ZUNIONSTORE", other, "2", a, b}, {"ZUNIONSTORE", a, "2", other, b}, {"ZINTERSTORE", a, "2", a, other},
		{"ZDIFFSTORE", a, "1", other}, {"ZUNION", "2", a, other}, {"ZINTER", "2", other, a, "WEIGHTS", "1", "2"},
		{"ZDIFF", "2", a, other}, {"ZINTERCARD", "2", a, other}, {"ZRANGESTORE", other, a, "0", "-1"},
	} {
		if got := exec(c...); got != crossslot {
			t.Errorf("%v = %q, want CROSSSLOT", c, got)
		}
	}
	if got := exec("ZUNION", "2", a, foreign); got != crossslot {
		t.Errorf("ZUNION with a foreign key = %q", got)
	}
	if got := exec("ZUNION", "1", foreign); !strings.HasPrefix(got, "-MOVED 12182 ") {
		t.Errorf("ZUNION of a foreign key = %q, want MOVED", got)
	}
	// Same slot: they run.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ZUNIONSTORE", c, "2", a, b}, ":2\r\n"},
		{[]string{"ZINTERCARD", "2", a, b}, ":1\r\n"},
		{[]string{"ZRANGESTORE", d, a, "0", "0"}, ":1\r\n"},
		{[]string{"ZDIFF", "2", a, b}, "*1\r\n$1\r\nn\r\n"},
		{[]string{"ZINTER", "2", a, b, "WEIGHTS", "1", "1", "AGGREGATE", "MAX"}, "*1\r\n$1\r\nm\r\n"},
	} {
		if got := exec(tc.args...); got != tc.want {
			t.Errorf("%v = %q, want %q", tc.args, got, tc.want)
		}
	}
	// A numkeys the command refuses names no keys: its own error, even
	// with keys of other slots around.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ZUNION", "3", a, other}, "-ERR syntax error\r\n"},
		{[]string{"ZUNION", "0", a, other}, "-ERR at least 1 input key is needed for 'zunion' command\r\n"},
		{[]string{"ZUNIONSTORE", a, "x", b, other}, "-ERR value is not an integer or out of range\r\n"},
		{[]string{"ZINTERCARD", "-1", other, a}, "-ERR at least 1 input key is needed for 'zintercard' command\r\n"},
		{[]string{"ZDIFFSTORE", other, "5", a}, "-ERR syntax error\r\n"},
	} {
		if got := exec(tc.args...); got != tc.want {
			t.Errorf("%v = %q, want %q", tc.args, got, tc.want)
		}
	}
	// COMMAND GETKEYS follows numkeys.
	if got := exec("COMMAND", "GETKEYS", "ZUNIONSTORE", "d", "2", "k1", "k2", "WEIGHTS", "1", "2"); got != "*3\r\n$1\r\nd\r\n$2\r\nk1\r\n$2\r\nk2\r\n" {
		t.Errorf("GETKEYS ZUNIONSTORE = %q", got)
	}
	if got := exec("COMMAND", "GETKEYS", "ZINTERCARD", "1", "k1", "LIMIT", "5"); got != "*1\r\n$2\r\nk1\r\n" {
		t.Errorf("GETKEYS ZINTERCARD = %q", got)
	}
}

// TestZscanLargeSet: past Redis's listpack size ZSCAN pages in score order
// with COUNT as a hint. Every member present for the whole scan with an
// unchanged score comes back, though members are added and removed
// between calls; without changes each comes exactly once and a run of
// equal scores is never split across replies.
func TestZscanLargeSet(t *testing.T) {
	_, _, exec := zsetEngine(t)
	for i := range 1000 {
		exec("ZADD", "z", strconv.Itoa(i%97), fmt.Sprintf("m%04d", i))
	}
	exec("ZADD", "z", "-inf", "lowest", "inf", "highest", "-0", "negzero")
	scan := func(mutate func(round int)) (map[string]int, int) {
		seen := map[string]int{}
		cursor, rounds := "0", 0
		for {
			rep := bulks(t, exec("ZSCAN", "z", cursor, "COUNT", "25"))
			cursor = rep[0]
			var scores []string
			for i := 1; i+1 < len(rep); i += 2 {
				seen[rep[i]]++
				scores = append(scores, rep[i+1])
			}
			if cursor != "0" {
				// The next reply starts at a new score.
				next := bulks(t, exec("ZSCAN", "z", cursor, "COUNT", "1"))
				if len(next) > 2 && len(scores) > 0 && next[2] == scores[len(scores)-1] {
					t.Fatalf("score %s split across replies", next[2])
				}
			}
			rounds++
			if mutate != nil {
				mutate(rounds)
			}
			if cursor == "0" || rounds > 10000 {
				return seen, rounds
			}
		}
	}
	seen, rounds := scan(nil)
	if len(seen) != 1003 || rounds < 1003/25/2 {
		t.Fatalf("scan saw %d members in %d rounds", len(seen), rounds)
	}
	for m, n := range seen {
		if n != 1 {
			t.Fatalf("%s returned %d times without changes", m, n)
		}
	}
	// Changes meanwhile: members m0000-m0499 stay put; others come and go.
	seen, _ = scan(func(round int) {
		exec("ZREM", "z", fmt.Sprintf("m%04d", 500+round))
		exec("ZADD", "z", strconv.Itoa(round%97), fmt.Sprintf("new%d", round))
		exec("ZREMRANGEBYSCORE", "z", "(96", "(inf")
	})
	for i := range 500 {
		if seen[fmt.Sprintf("m%04d", i)] == 0 {
			t.Fatalf("m%04d was present throughout but not returned", i)
		}
	}
	// A cursor that no score maps to is an empty end, not an error.
	if got := bulks(t, exec("ZSCAN", "z", strconv.FormatUint(math.MaxUint64, 10))); len(got) != 1 || got[0] != "0" {
		t.Fatalf("ZSCAN past the end = %q", got)
	}
	if got := bulks(t, exec("ZSCAN", "z", "1", "COUNT", "1")); got[1] != "lowest" {
		t.Fatalf("ZSCAN below -inf starts at %q", got[1])
	}
}

// TestZrandmemberPicks checks the random cases the conformance script
// cannot compare with redis-server.
func TestZrandmemberPicks(t *testing.T) {
	_, _, exec := zsetEngine(t)
	members := map[string]string{}
	for i := range 40 {
		m := fmt.Sprintf("m%d", i)
		members[m] = strconv.Itoa(i)
		exec("ZADD", "z", strconv.Itoa(i), m)
	}
	for _, count := range []int{1, 5, 13, 30, 39} { // both ways of picking distinct members
		got := bulks(t, exec("ZRANDMEMBER", "z", strconv.Itoa(count), "WITHSCORES"))
		if len(got) != 2*count {
			t.Fatalf("count %d: %d replies", count, len(got))
		}
		seen := map[string]bool{}
		for i := 0; i < len(got); i += 2 {
			if members[got[i]] != got[i+1] || seen[got[i]] {
				t.Fatalf("count %d: %q score %q (repeat %v)", count, got[i], got[i+1], seen[got[i]])
			}
			seen[got[i]] = true
		}
	}
	got := bulks(t, exec("ZRANDMEMBER", "z", "-500"))
	distinct := map[string]bool{}
	for _, m := range got {
		if _, ok := members[m]; !ok {
			t.Fatalf("picked %q", m)
		}
		distinct[m] = true
	}
	if len(got) != 500 || len(distinct) < 30 {
		t.Fatalf("-500: %d picks, %d distinct", len(got), len(distinct))
	}
	if m := bulks(t, exec("ZRANDMEMBER", "z"))[0]; members[m] == "" {
		t.Fatalf("ZRANDMEMBER = %q", m)
	}
	if got := exec("ZRANDMEMBER", "z", strconv.Itoa(-maxRandomPicks-1)); got[0] != '-' {
		t.Fatalf("an unbounded pick was served: %.40q", got)
	}
}

// TestZsetMemoryAccountingThroughCommands: every command that changes a
// sorted set re-accounts it: after a mix of them the key accounts exactly
// what a fresh copy of it (RESTORE of its DUMP) does, and removing every
// member gives every byte back.
func TestZsetMemoryAccountingThroughCommands(t *testing.T) {
	_, reg, exec := zsetEngine(t)
	def, _ := reg.Get(namespace.Default)
	db := def.DB
	base := db.Used()
	for i := range 500 {
		exec("ZADD", "z", strconv.Itoa(i%50), fmt.Sprintf("member-%d", i))
	}
	for _, c := range []string{"ZINCRBY z 5 member-3", "ZREM z member-1 member-2", "ZPOPMIN z 3", "ZPOPMAX z",
		"ZREMRANGEBYRANK z 0 9", "ZREMRANGEBYSCORE z (40 45", "ZADD z 0 a 0 b 0 c", "ZREMRANGEBYLEX z [a (c",
		"ZADD z GT CH 100 member-499", "ZUNIONSTORE z 1 z WEIGHTS 2", "ZRANGESTORE z z 0 300"} {
		if got := exec(strings.Fields(c)...); got[0] == '-' {
			t.Fatalf("%s: %s", c, got)
		}
	}
	used := db.Used() - base
	dump := exec("DUMP", "z")
	payload := dump[strings.Index(dump, "\r\n")+2 : len(dump)-2]
	exec("DEL", "z")
	if db.Used() != base {
		t.Fatalf("DEL left %d bytes accounted", db.Used()-base)
	}
	if got := exec("RESTORE", "z", "0", payload); got != "+OK\r\n" {
		t.Fatalf("RESTORE: %s", got)
	}
	if fresh := db.Used() - base; fresh != used {
		t.Fatalf("after the commands the set accounts %d bytes, a fresh copy of it %d", used, fresh)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(exec("ZCARD", "z")[1:]))
	for range n {
		exec("ZPOPMIN", "z")
	}
	if exec("EXISTS", "z") != ":0\r\n" || db.Used() != base {
		t.Fatalf("emptied set: exists %s, %d bytes left", exec("EXISTS", "z"), db.Used()-base)
	}
}

// TestZsetQuotaAndEviction: sorted sets count against a namespace's quota
// like every type: under noeviction a ZADD past it is refused with OOM;
// under allkeys-lru older sets are evicted to make room.
func TestZsetQuotaAndEviction(t *testing.T) {
	for _, p := range []evict.Policy{evict.NoEviction, evict.AllKeysLRU} {
		t.Run(p.String(), func(t *testing.T) {
			e, reg, _ := zsetEngine(t, namespace.Settings{Name: "q", HasSecret: true, Secret: sha("pw"), MaxMemory: 256 << 10, Policy: p})
			_, exec := session(e)
			if got := exec("AUTH", "q", "pw"); got != "+OK\r\n" {
				t.Fatal(got)
			}
			ns, _ := reg.Get("q")
			oom := 0
			for k := range 40 {
				args := []string{"ZADD", fmt.Sprintf("z%d", k)}
				for i := range 100 {
					args = append(args, strconv.Itoa(i), fmt.Sprintf("a-member-of-some-length-%d", i))
				}
				if got := exec(args...); strings.HasPrefix(got, "-OOM") {
					oom++
				} else if got[0] == '-' {
					t.Fatal(got)
				}
			}
			used := ns.DB.Used()
			switch p {
			case evict.NoEviction:
				if oom == 0 || used > 256<<10+64<<10 {
					t.Fatalf("noeviction: %d OOM replies, %d bytes used", oom, used)
				}
			default:
				if oom != 0 || ns.DB.Evicted() == 0 || used > 256<<10+64<<10 {
					t.Fatalf("lru: %d OOM, %d evicted, %d bytes used", oom, ns.DB.Evicted(), used)
				}
			}
		})
	}
}

// TestZsetDumpRestore: DUMP of a sorted set restores it with its scores
// (infinities and -0 of a large set included) and its TTL, and TYPE says
// zset.
func TestZsetDumpRestore(t *testing.T) {
	_, _, exec := zsetEngine(t)
	for i := range 200 {
		exec("ZADD", "src", strconv.Itoa(-1-i%13), fmt.Sprintf("m%d", i))
	}
	// A set past 128 members keeps -0, also when the -0s are among the
	// first members a load inserts (the highest).
	exec("ZADD", "src", "-inf", "lo", "inf", "hi", "-0", "nz", "1.1", "frac", "-0", "zz")
	exec("PEXPIRE", "src", "100000")
	dump := exec("DUMP", "src")
	payload := dump[strings.Index(dump, "\r\n")+2 : len(dump)-2]
	if got := exec("RESTORE", "dst", "50000", payload); got != "+OK\r\n" {
		t.Fatal(got)
	}
	a, b := exec("ZRANGE", "src", "0", "-1", "WITHSCORES"), exec("ZRANGE", "dst", "0", "-1", "WITHSCORES")
	if a != b || !strings.Contains(a, "$2\r\nnz\r\n$2\r\n-0\r\n") || !strings.Contains(a, "$2\r\nzz\r\n$2\r\n-0\r\n") {
		t.Fatalf("restored set differs or lost -0:\n%.300s\n%.300s", a, b)
	}
	if got := exec("TYPE", "dst"); got != "+zset\r\n" {
		t.Fatal(got)
	}
	if ttl, _ := strconv.Atoi(strings.TrimSpace(exec("PTTL", "dst")[1:])); ttl <= 0 || ttl > 50000 {
		t.Fatalf("PTTL %d", ttl)
	}
	if got := exec("RESTORE", "dst", "0", payload); !strings.HasPrefix(got, "-BUSYKEY") {
		t.Fatal(got)
	}
}

// TestZsetValueSizeLimit: a member past the namespace's max value size is
// refused like a SADD member, before anything changes.
func TestZsetValueSizeLimit(t *testing.T) {
	_, _, exec := zsetEngine(t)
	big := strings.Repeat("x", namespace.DefaultMaxValueSize+1)
	if got := exec("ZADD", "z", "1", "ok", "2", big); !strings.Contains(got, "exceeds the namespace's max value size") {
		t.Fatalf("ZADD of a huge member = %.80q", got)
	}
	if got := exec("EXISTS", "z"); got != ":0\r\n" {
		t.Fatal("a refused ZADD created the key")
	}
}

// TestZsetReplyAllocs: the hot commands of the benchmark build their
// replies without allocating per member.
func TestZsetReplyAllocs(t *testing.T) {
	e, _, exec := zsetEngine(t)
	for i := range 1000 {
		exec("ZADD", "z", strconv.Itoa(i), fmt.Sprintf("member:%d", i))
	}
	s := e.NewSession("t")
	var w resp.Writer
	for _, c := range [][]string{
		{"ZRANGEBYSCORE", "z", "100", "+inf", "LIMIT", "0", "10"},
		{"ZRANGEBYSCORE", "z", "(100", "200", "WITHSCORES", "LIMIT", "0", "10"},
		{"ZADD", "z", "5", "member:7"},
		{"ZINCRBY", "z", "1", "member:9"},
		{"ZSCORE", "z", "member:9"},
	} {
		args := make([][]byte, len(c))
		for i, a := range c {
			args[i] = []byte(a)
		}
		allocs := testing.AllocsPerRun(200, func() {
			w.Reset()
			e.Exec(s, args, &w)
		})
		if allocs > 2 {
			t.Errorf("%v: %.1f allocations per run", c, allocs)
		}
	}
}

func TestParseCursor(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "": 0, "+7": 7, "-1": -1, "18446744073709551615": -1, "12\x00x": 12} {
		if got, ok := parseCursor([]byte(in)); !ok || got != uint64(want) {
			t.Errorf("parseCursor(%q) = %d %v", in, got, ok)
		}
	}
	for _, in := range []string{" 1", "x", "1x", "+", "-", "18446744073709551616"} {
		if _, ok := parseCursor([]byte(in)); ok {
			t.Errorf("parseCursor(%q) accepted", in)
		}
	}
	scores := []float64{math.Inf(-1), -1e300, -1, -math.SmallestNonzeroFloat64, 0, math.SmallestNonzeroFloat64, 1, 1e300, math.Inf(1)}
	for i := 1; i < len(scores); i++ {
		if scoreKey(scores[i-1]) >= scoreKey(scores[i]) || scoreKey(scores[i-1]) == 0 {
			t.Fatalf("scoreKey(%v) = %d, scoreKey(%v) = %d", scores[i-1], scoreKey(scores[i-1]), scores[i], scoreKey(scores[i]))
		}
	}
	if scoreKey(math.Copysign(0, -1)) != scoreKey(0) {
		t.Fatal("-0 and 0 have different cursors")
	}
}
