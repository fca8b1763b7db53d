package slots_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/cachenode/slots"
	"github.com/portico-io/portico/internal/testdeps"
)

func TestKnownSlots(t *testing.T) {
	// Values from the Redis Cluster specification and redis-cli.
	for key, want := range map[string]int{"": 0, "foo": 12182, "bar": 5061, "123456789": 0x31C3 & (slots.N - 1),
		"{user1000}.following": slots.Of([]byte("user1000")), "{}x": slots.Of([]byte("{}x")), "a{": slots.Of([]byte("a{"))} {
		if got := slots.Of([]byte(key)); got != want {
			t.Errorf("Of(%q) = %d, want %d", key, got, want)
		}
	}
	if c := slots.CRC16([]byte("123456789")); c != 0x31C3 {
		t.Fatalf("CRC16(123456789) = %#x, want 0x31c3 (XMODEM check value)", c)
	}
}

// TestSlotsMatchRedisServer uses a private redis-server in cluster mode as
// the oracle: CLUSTER KEYSLOT for thousands of random keys, hash-tag edge
// cases included.
func TestSlotsMatchRedisServer(t *testing.T) {
	rs := testdeps.RedisServer(t, "--cluster-enabled", "yes")
	c := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	keys := []string{"", "{", "}", "{}", "{}{}", "{{a}}", "{a}}", "a{b}c{d}", "a{}b{c}", "{a", "a}", "}{a}", "{{}}", "{ }",
		"x{\x00}", "\xff{\xfe}", "{user1000}.following", "{user1000}.followers", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}"}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("ab{}{}xyz\x00\xff-")
	for range 4000 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			if r.IntN(3) == 0 {
				b[i] = alphabet[r.IntN(len(alphabet))]
			} else {
				b[i] = byte(r.IntN(256))
			}
		}
		keys = append(keys, string(b))
	}
	pipe := c.Pipeline()
	cmds := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.ClusterKeySlot(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	bad := 0
	for i, k := range keys {
		if got, want := int64(slots.Of([]byte(k))), cmds[i].Val(); got != want {
			if bad++; bad < 20 {
				t.Errorf("Of(%q) = %d, redis-server says %d", k, got, want)
			}
		}
	}
	t.Logf("%d keys compared with redis-server's CLUSTER KEYSLOT, %d differ", len(keys), bad)
}
