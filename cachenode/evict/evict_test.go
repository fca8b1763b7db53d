package evict

import (
	"errors"
	"testing"
)

const minute = 60_000

func TestParse(t *testing.T) {
	for _, p := range []Policy{AllKeysLRU, AllKeysLFU, VolatileTTL, NoEviction} {
		got, err := Parse(p.String())
		if err != nil || got != p {
			t.Errorf("Parse(%q) = %v, %v", p.String(), got, err)
		}
	}
	if _, err := Parse("ALLKEYS-LFU"); err != nil {
		t.Errorf("Parse is case-insensitive: %v", err)
	}
	if _, err := Parse("allkeys-random"); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("Parse(allkeys-random) = %v", err)
	}
}

func TestLFUCounterGrowsLogarithmicallyAndDecays(t *testing.T) {
	now := int64(1_000 * minute)
	m := Init(AllKeysLFU, now)
	if c := Counter(m, now); c != LFUInitVal {
		t.Fatalf("new key counter = %d, want %d", c, LFUInitVal)
	}
	for range 100 {
		m = Touch(AllKeysLFU, m, now)
	}
	c100 := Counter(m, now)
	for range 10_000 {
		m = Touch(AllKeysLFU, m, now)
	}
	c10k := Counter(m, now)
	// Logarithmic growth, as Redis documents for lfu-log-factor 10: about 10
	// after 100 hits, tens (not thousands) after 10k.
	if c100 < 7 || c100 > 14 || c10k <= c100 || c10k > 80 {
		t.Fatalf("counter after 100 hits %d, after 10100 hits %d", c100, c10k)
	}
	// One decrement per idle minute.
	if got := Counter(m, now+3*minute); got != c10k-3 {
		t.Fatalf("after 3 idle minutes counter = %d, want %d", got, c10k-3)
	}
	if got := Counter(m, now+1000*minute); got != 0 {
		t.Fatalf("after a long idle time counter = %d, want 0", got)
	}
	// Higher counter = worse victim.
	if Score(AllKeysLFU, m, 0, now) >= Score(AllKeysLFU, Init(AllKeysLFU, now), 0, now) {
		t.Fatal("a hot key scores as a better LFU victim than a new key")
	}
}

func TestLRUAndTTLScores(t *testing.T) {
	now := int64(5_000_000)
	old, recent := Init(AllKeysLRU, now-100_000), Touch(AllKeysLRU, 0, now-1_000)
	if Score(AllKeysLRU, old, 0, now) <= Score(AllKeysLRU, recent, 0, now) {
		t.Fatal("LRU: the older key is not the better victim")
	}
	if IdleSeconds(old, now) != 100 {
		t.Fatalf("idle = %d", IdleSeconds(old, now))
	}
	if Score(VolatileTTL, 0, now+1000, now) <= Score(VolatileTTL, 0, now+5000, now) {
		t.Fatal("volatile-ttl: the sooner deadline is not the better victim")
	}
	if Score(VolatileTTL, 0, 0, now) != 0 {
		t.Fatal("volatile-ttl: a key without TTL is a candidate")
	}
	if NoEviction.Evicts() || !VolatileTTL.VolatileOnly() || AllKeysLFU.VolatileOnly() {
		t.Fatal("policy predicates")
	}
}
