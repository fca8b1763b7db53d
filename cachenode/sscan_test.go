package cachenode_test

import (
	"fmt"
	"strconv"
	"testing"
)

// TestSScanHScanCursors: a container too large for one reply is walked by
// cursor; every member present for the whole walk comes back, once when
// nothing changes, whatever is added and removed meanwhile otherwise.
func TestSScanHScanCursors(t *testing.T) {
	n := startNode(t)
	c := n.client(t)
	const size = 1000
	members := make([]any, size)
	fields := make([]any, 0, 2*size)
	for i := range members {
		members[i] = fmt.Sprintf("m%04d", i)
		fields = append(fields, fmt.Sprintf("f%04d", i), strconv.Itoa(i))
	}
	if err := c.SAdd(ctx(t), "big", members...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx(t), "bigh", fields...).Err(); err != nil {
		t.Fatal(err)
	}
	walk := func(scan func(cur uint64) ([]string, uint64, error), during func(step int)) map[string]int {
		seen := map[string]int{}
		cur, steps := uint64(0), 0
		for {
			keys, next, err := scan(cur)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				seen[k]++
			}
			if during != nil {
				during(steps)
			}
			if steps++; next == 0 {
				break
			}
			if steps > 10*size {
				t.Fatal("the cursor does not end")
			}
			cur = next
		}
		if steps < 10 {
			t.Fatalf("%d calls with COUNT 50 over %d members: not paged", steps, size)
		}
		return seen
	}
	seen := walk(func(cur uint64) ([]string, uint64, error) { return c.SScan(ctx(t), "big", cur, "", 50).Result() }, nil)
	if len(seen) != size {
		t.Fatalf("SSCAN returned %d distinct members of %d", len(seen), size)
	}
	for m, k := range seen {
		if k != 1 {
			t.Fatalf("SSCAN returned %s %d times", m, k)
		}
	}
	hseen := walk(func(cur uint64) ([]string, uint64, error) {
		kv, next, err := c.HScan(ctx(t), "bigh", cur, "f00*", 50).Result()
		var ks []string
		for i := 0; i+1 < len(kv); i += 2 {
			if want := kv[i][1:]; strconv.Itoa(mustAtoi(t, want)) != kv[i+1] {
				t.Fatalf("HSCAN pair %s=%s", kv[i], kv[i+1])
			}
			ks = append(ks, kv[i])
		}
		return ks, next, err
	}, nil)
	if len(hseen) != 100 {
		t.Fatalf("HSCAN MATCH f00* returned %d fields, want 100", len(hseen))
	}
	// Members added and removed during the walk do not hide the others.
	seen = walk(func(cur uint64) ([]string, uint64, error) { return c.SScan(ctx(t), "big", cur, "m*", 50).Result() }, func(step int) {
		c.SAdd(ctx(t), "big", fmt.Sprintf("new%d", step))
		c.SRem(ctx(t), "big", fmt.Sprintf("new%d", step-1))
	})
	for _, m := range members {
		if seen[m.(string)] != 1 {
			t.Fatalf("%s returned %d times while the set changed", m, seen[m.(string)])
		}
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
