package bucket

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/testdeps"
)

func TestHashTag(t *testing.T) {
	for key, want := range map[string]string{
		"p:{portico|consumer=acme}:r:1000": "portico|consumer=acme",
		"p:{a}{b}":                         "a",
		"p:{}{b}":                          "p:{}{b}", // empty: the whole key
		"p:{a":                             "p:{a",
		"p:}{a}":                           "a",
		"plain":                            "plain",
	} {
		if got := hashTag(key); got != want {
			t.Errorf("hashTag(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestTagGroups(t *testing.T) {
	items := func(keys ...string) []Item {
		var out []Item
		for _, k := range keys {
			out = append(out, Item{Key: k})
		}
		return out
	}
	for _, c := range []struct {
		keys []string
		want string
	}{
		{[]string{"{a}1"}, "[]"},
		{[]string{"{a}1", "{a}2", "x{a}3"}, "[]"},
		{[]string{"{a}1", "{b}1", "{a}2", "{c}1", "{b}2"}, "[[0 2] [1 4] [3]]"},
		{[]string{"{a}1", "{a}2", "{b}1"}, "[[0 1] [2]]"},
	} {
		if got := fmt.Sprint(tagGroups(items(c.keys...))); got != c.want {
			t.Errorf("tagGroups(%v) = %s, want %s", c.keys, got, c.want)
		}
	}
}

// refund.lua gives back into the window the tokens were taken from, even
// when the bucket has moved on since: a sliding window's count is the
// previous one by then; a fixed window's has ended (nothing to give back);
// a token bucket gets its tokens back on top of what it holds now, up to
// its capacity.
func TestRefundAfterTheBucketMovedOn(t *testing.T) {
	c := NewRedisClient(testdeps.Redis(t))
	t.Cleanup(func() { _ = c.Close() })
	now := time.UnixMilli(19675 * 86_400_000) // a day boundary
	r, err := NewRedis(RedisConfig{Client: c, Timeout: 2 * time.Second, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	pfx := "portico:test:" + t.Name() + ":" + hex.EncodeToString(b[:]) + ":"
	ctx := context.Background()
	sw := Item{Key: pfx + "{s}", Kind: SlidingWindow, Limit: 10, Capacity: 10, Window: time.Minute, Cost: 3, Veto: true}
	fw := Item{Key: pfx + "{f}", Kind: FixedWindow, Limit: 10, Window: time.Minute, Cost: 3, Veto: true}
	tb := Item{Key: pfx + "{t}", Limit: 10, Capacity: 10, Window: time.Minute, Cost: 3, Veto: true}
	var first []part
	for _, it := range []Item{sw, fw, tb} {
		rep, err := r.check(ctx, []Item{it}, true)
		if err != nil || !rep.committed() {
			t.Fatalf("%s: %v %v", it.Key, rep, err)
		}
		first = append(first, part{items: []Item{it}, rep: rep})
	}
	// The next window: each bucket takes 1 more.
	now = now.Add(time.Minute + time.Second)
	for _, it := range []Item{sw, fw, tb} {
		it.Cost = 1
		if rep, err := r.check(ctx, []Item{it}, true); err != nil || !rep.committed() {
			t.Fatalf("%s: %v %v", it.Key, rep, err)
		}
	}
	r.refund(ctx, first)
	fields := func(key string, names ...string) string {
		vals, err := c.HMGet(ctx, key, names...).Result()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for i, n := range names {
			out = append(out, fmt.Sprintf("%s=%v", n, vals[i]))
		}
		return strings.Join(out, " ")
	}
	// Sliding: this window counts 1, the previous one 3 - 3.
	if got, want := fields(sw.Key, "c", "p"), "c=1 p=0"; got != want {
		t.Errorf("sliding window after refund: %s, want %s", got, want)
	}
	// Fixed: the window the 3 were taken from is over.
	if got, want := fields(fw.Key, "c"), "c=1"; got != want {
		t.Errorf("fixed window after refund: %s, want %s", got, want)
	}
	// Token bucket: 10 - 3, refilled to 10 over the minute, - 1 = 9, + 3
	// given back = 12, capped at 10 (tokens are stored × window ms).
	if got, want := fields(tb.Key, "t"), fmt.Sprintf("t=%d", 10*time.Minute.Milliseconds()); got != want {
		t.Errorf("token bucket after refund: %s, want %s", got, want)
	}
	if given, failed := r.Refunds(); given != 3 || failed != 0 {
		t.Errorf("refunds %d given, %d failed; want 3, 0", given, failed)
	}
}

// A request over two shards takes the first shard's half-open permit, then
// the second shard's open breaker refuses: the permit must still get an
// outcome (a ping), or that half-open breaker would refuse every call for
// ever.
func TestSpreadAnswersTakenPermits(t *testing.T) {
	t.Parallel() // starts a Cluster of its own: overlap the starts
	var seeds []string
	for _, p := range testdeps.RedisCluster(t, 3) {
		seeds = append(seeds, p.Addr)
	}
	c := NewClient(ClientConfig{Addr: strings.Join(seeds, ",")})
	t.Cleanup(func() { _ = c.Close() })
	r, err := NewRedis(RedisConfig{Client: c, Timeout: 2 * time.Second, BreakerDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	pfx := "portico:test:" + hex.EncodeToString(b[:]) + ":"
	half := pfx + "{0}"
	var open string
	for i := 1; open == ""; i++ {
		if k := fmt.Sprintf("%s{%d}", pfx, i); r.shard(ctx, k) != r.shard(ctx, half) {
			open = k
		}
	}
	r.breaker(r.shard(ctx, half)).HalfOpen()
	r.breaker(r.shard(ctx, open)).Open()
	item := func(key string) Item {
		return Item{Key: key, Limit: 5, Capacity: 5, Window: time.Hour, Cost: 1, Veto: true}
	}
	if _, err := r.Check(ctx, []Item{item(half), item(open)}); !errors.Is(err, ErrBreakerOpen) {
		t.Fatalf("check over an open breaker: %v, want ErrBreakerOpen", err)
	}
	if !r.breaker(r.shard(ctx, half)).IsClosed() {
		t.Fatal("the half-open breaker was left without an outcome")
	}
	if d, err := r.Check(ctx, []Item{item(half)}); err != nil || !d.Committed {
		t.Fatalf("check on the recovered shard: %+v %v", d, err)
	}
}
