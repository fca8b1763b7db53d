package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/internal/testdeps"
)

// explain runs sql under EXPLAIN (ANALYZE, FORMAT JSON) and returns the
// rows every plan node read (rows returned times loops, plus rows its
// filters removed: the cost that does not depend on the machine's speed)
// and the node names.
func explain(t *testing.T, s *Store, sql string, args ...any) (int, string) {
	t.Helper()
	var raw []byte
	if err := s.pool.QueryRow(context.Background(), "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&raw); err != nil {
		t.Fatalf("%v\n%s", err, sql)
	}
	var doc []struct{ Plan map[string]any }
	if err := json.Unmarshal(raw, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("explain output: %v: %s", err, raw)
	}
	var (
		sum   float64
		nodes []string
		walk  func(n map[string]any)
	)
	num := func(n map[string]any, k string) float64 { v, _ := n[k].(float64); return v }
	walk = func(n map[string]any) {
		loops := max(num(n, "Actual Loops"), 1)
		sum += (num(n, "Actual Rows") + num(n, "Rows Removed by Filter") + num(n, "Rows Removed by Index Recheck")) * loops
		name, _ := n["Node Type"].(string)
		if idx, ok := n["Index Name"].(string); ok {
			name += " " + idx
		} else if rel, ok := n["Relation Name"].(string); ok {
			name += " " + rel
		}
		nodes = append(nodes, name)
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			if m, ok := k.(map[string]any); ok {
				walk(m)
			}
		}
	}
	walk(doc[0].Plan)
	return int(sum), strings.Join(nodes, ", ")
}

// A page of consumers, or of one consumer's keys, reads about a page of
// rows whatever the table holds: keyset pagination on the partial indexes
// of current rows, never a scan of every consumer or key (measured on
// 5,000 keys of 100 consumers, with revisions and deletions beside them).
func TestListPagesReadAPage(t *testing.T) {
	s := openStore(t, testdeps.Postgres(t))
	ctx := context.Background()
	var (
		consumers []*spec.Consumer
		keys      []*spec.APIKey
	)
	for i := range 100 {
		c := &spec.Consumer{Name: fmt.Sprintf("c%04d", i), Tenant: "t"}
		consumers = append(consumers, c)
		for j := range 50 {
			id := fmt.Sprintf("c%04d-k%03d", i, j)
			keys = append(keys, &spec.APIKey{Name: id, Consumer: c.Name, SHA256: hashOf(id)})
		}
	}
	if _, _, err := s.Import(ctx, meta, consumers, keys, nil); err != nil {
		t.Fatal(err)
	}
	// Old revisions and tombstones are in the table too.
	for i := range 20 {
		mustApply(t, s, Change{Kind: spec.KindAPIKey, Name: fmt.Sprintf("c0050-k%03d", i)})
	}
	const limit = 51
	for _, c := range []struct {
		name, sql string
		args      []any
	}{
		{"consumers from the start", listSQL, []any{string(spec.KindConsumer), "", limit}},
		{"consumers mid-way", listSQL, []any{string(spec.KindConsumer), "c0050", limit}},
		{"keys of one consumer", listAPIKeysSQL, []any{"c0050", "", limit}},
		{"keys of one consumer mid-way", listAPIKeysSQL, []any{"c0099", "c0099-k010", limit}},
	} {
		work, plan := explain(t, s, c.sql, c.args...)
		t.Logf("%s: %d rows read: %s", c.name, work, plan)
		if work > 3*limit || strings.Contains(plan, "Seq Scan") {
			t.Errorf("%s reads %d rows (%s), want about a page", c.name, work, plan)
		}
	}
}
