package store

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// planWork sums what every node of an EXPLAIN (ANALYZE, FORMAT JSON) plan
// read: rows returned times loops plus rows its filters removed. It is
// the cost that does not depend on the machine's speed.
func planWork(t *testing.T, raw []byte) (int, string) {
	t.Helper()
	var doc []struct {
		Plan map[string]any
		JIT  map[string]any
	}
	if err := json.Unmarshal(raw, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("explain output: %v: %s", err, raw)
	}
	if doc[0].JIT != nil {
		// A plan priced over jit_above_cost is compiled on every run.
		t.Errorf("statement was JIT-compiled: %v", doc[0].JIT)
	}
	var (
		sum   float64
		nodes []string
		walk  func(n map[string]any)
	)
	num := func(n map[string]any, k string) float64 { v, _ := n[k].(float64); return v }
	walk = func(n map[string]any) {
		loops := max(num(n, "Actual Loops"), 1)
		sum += num(n, "Actual Rows")*loops + (num(n, "Rows Removed by Filter")+num(n, "Rows Removed by Join Filter"))*loops
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

// explainWork runs sql under EXPLAIN ANALYZE inside a transaction that is
// rolled back, after the given session settings, and returns planWork.
func explainWork(t *testing.T, s *Store, settings []string, sql string, args ...any) (int, string) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, set := range settings {
		if _, err := tx.Exec(ctx, set); err != nil {
			t.Fatal(err)
		}
	}
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&raw); err != nil {
		t.Fatalf("%v\n%s", err, sql)
	}
	return planWork(t, raw)
}

// claimProbes are the two claim statements as a worker with 16 free slots
// and 4 of them kept for HIGH runs sends them (prepared as name, types).
var claimProbes = []struct{ name, sql, types, args string }{
	{"claim", claimSQL, `(text, bigint, int, int, int, text[], int[], bytea[], text, int)`,
		`('w2', 60000, 16, 2, 0, NULL, NULL, NULL, NULL, 12)`},
	{"plain claim", claimPlainSQL, `(text, bigint, int, int, int)`, `('w2', 60000, 16, 2, 12)`},
}

// TestPlansSurviveStaleStatistics replays how a burst meets the planner:
// n runs are inserted SCHEDULED and analyzed while the partial indexes of
// queued and running runs are empty, then all of them are fired. Until
// the next ANALYZE those indexes look empty; the claim, lease writes and
// the fire's shard check must still read about what they return, not
// every run in flight (before the planner guards: ~20,000 rows per claim,
// heartbeat and completion, and 1024 x 342 comparisons per shard check).
func TestPlansSurviveStaleStatistics(t *testing.T) {
	const n = 3000
	ctx := context.Background()
	s := openTestStore(t)
	if _, err := s.pool.Exec(ctx, `ALTER TABLE scheduler.scheduled_execution SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	spec := oneOffRetrySpec
	insertDue(t, s, "t1", spec, n)
	if _, err := s.pool.Exec(ctx, `VACUUM ANALYZE scheduler.scheduled_execution`); err != nil {
		t.Fatal(err)
	}
	// Half the shards leased to "me" (the fire's shard check below).
	if _, err := s.pool.Exec(ctx, `UPDATE scheduler.shard_lease SET owner = 'me', epoch = 7,
		expires_at = now() + interval '1 hour' WHERE shard % 2 = 0`); err != nil {
		t.Fatal(err)
	}
	res, err := s.Fire(ctx, 2*n, func(DueRun, time.Time) FireDecision { return FireDecision{Status: StatusQueued} })
	if err != nil || res.Claimed != n {
		t.Fatalf("fire: %+v, %v", res, err)
	}
	leases, err := s.Claim(ctx, "w1", 16, time.Minute, 2)
	if err != nil || len(leases) != 16 {
		t.Fatalf("claim: %d leases, %v", len(leases), err)
	}
	// Stale: the planner still believes nothing is queued or running.
	var queuedEstimate float64
	if err := s.pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE relname = 'scheduled_execution_inflight'`).
		Scan(&queuedEstimate); err != nil {
		t.Fatal(err)
	}
	t.Logf("in-flight index tuples as the planner sees them: %.0f (actual %d)", queuedEstimate, n)

	// The claim, as a custom and as a generic plan (pgx's prepared
	// statements get the latter after five executions).
	for i, c := range claimProbes {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			name := "probe_" + mode + strconv.Itoa(i)
			work, nodes := explainWork(t, s, append(claimPlanning, "SET LOCAL plan_cache_mode = "+mode,
				"PREPARE "+name+c.types+" AS "+c.sql), "EXECUTE "+name+c.args)
			t.Logf("%s (%s): %d rows read: %s", c.name, mode, work, nodes)
			if work > 500 {
				t.Errorf("%s (%s) read %d rows to lease 12 of %d queued runs: %s", c.name, mode, work, n, nodes)
			}
		}
	}

	// The fire's write for a pass of 1000 runs (rolled back).
	var fireIDs []int64
	rows, _ := s.pool.Query(ctx, `SELECT id FROM scheduler.scheduled_execution ORDER BY id DESC LIMIT 1000`)
	if fireIDs, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		t.Fatal(err)
	}
	prio, tenants, ready := make([]int16, len(fireIDs)), make([]string, len(fireIDs)), make([]time.Time, len(fireIDs))
	for i := range fireIDs {
		prio[i], tenants[i], ready[i] = 1, "t1", time.Now()
	}
	work, nodes := explainWork(t, s, firePlanning, fireQueuedSQL, fireIDs, prio, tenants, ready)
	t.Logf("fire update: %d rows read: %s", work, nodes)
	if work > 4*len(fireIDs) {
		t.Errorf("fire update read %d rows for %d runs: %s", work, len(fireIDs), nodes)
	}

	l := leases[0]
	remote, err := s.ClaimRemote(ctx, "w3", "spiffe://test/worker/w3", 1, time.Minute, 2)
	if err != nil || len(remote) != 1 {
		t.Fatalf("remote claim: %d leases, %v", len(remote), err)
	}
	ids, toks := []int64{}, []int64{}
	for _, x := range leases[:8] {
		ids, toks = append(ids, x.RunID), append(toks, x.Token)
	}
	for name, probe := range map[string]struct {
		sql   string
		args  []any
		limit int
	}{
		"heartbeat": {heartbeatSQL, []any{l.RunID, l.Token, int64(60000)}, 10},
		"heartbeat (remote)": {heartbeatRemoteSQL, []any{remote[0].RunID, leaseSecretHash(remote[0].Secret),
			"spiffe://test/worker/w3", int64(60000)}, 10},
		"succeed many":   {succeedManySQL, []any{ids, toks}, 100},
		"heartbeat many": {heartbeatManySQL, []any{ids, toks, int64(60000)}, 100},
		"shard check":    {shardCheckSQL, []any{"me"}, 2 * Shards}, // a scan of the 1024 leases
	} {
		work, nodes := explainWork(t, s, nil, probe.sql, probe.args...)
		t.Logf("%s: %d rows read: %s", name, work, nodes)
		if work > probe.limit {
			t.Errorf("%s read %d rows: %s", name, work, nodes)
		}
	}

	// And the guards change no answer: the leases still fence.
	if err := s.Heartbeat(ctx, l.RunID, l.Token, time.Minute); err != nil {
		t.Fatalf("heartbeat with the current token: %v", err)
	}
	if err := s.Heartbeat(ctx, l.RunID, l.Token-1, time.Minute); err == nil {
		t.Fatal("heartbeat with a stale token was accepted")
	}
	errs, err := s.SucceedMany(ctx, ids, toks)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("succeed %d: %v", ids[i], e)
		}
	}
	if errs, _ := s.SucceedMany(ctx, ids[:1], toks[:1]); errs[0] == nil {
		t.Fatal("a second success for the same lease was accepted")
	}
	held := []ShardLease{{Shard: 0, Epoch: 7}, {Shard: 2, Epoch: 6}, {Shard: 3, Epoch: 7}}
	var owned []ShardLease
	rows, _ = s.pool.Query(ctx, shardCheckSQL, "me")
	if owned, err = pgx.CollectRows(rows, pgx.RowToStructByPos[ShardLease]); err != nil {
		t.Fatal(err)
	}
	if got := stillHeld(held, owned); len(got) != 1 || got[0] != 0 {
		t.Fatalf("still held: %v, want [0] (2 has moved to epoch 7, 3 is not ours)", got)
	}
}

// TestFireLooksUpOnlyItsJobs: a fire pass reads the jobs of the runs it
// fires and no others, each by primary key (about ten plan nodes see
// each run once). Written as a join, the read hashed a sequential scan of
// every job on each pass whenever the planner expected many due runs:
// the whole job table of an installation on every pass.
func TestFireLooksUpOnlyItsJobs(t *testing.T) {
	const n, batch = 3000, 500
	ctx := context.Background()
	s := openTestStore(t)
	insertDue(t, s, "t1", oneOffSpec, n)
	if _, err := s.pool.Exec(ctx, `ANALYZE scheduler.schedule_details; ANALYZE scheduler.scheduled_execution`); err != nil {
		t.Fatal(err)
	}
	rows, _ := s.pool.Query(ctx, `SELECT id FROM scheduler.scheduled_execution ORDER BY id LIMIT $1`, batch/10)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	for name, q := range map[string]struct {
		sql  string
		args []any
		runs int
	}{
		"due runs":   {fireDueSQL, []any{batch, nil}, batch},
		"runs by id": {fireRunsSQL, []any{batch, nil, ids}, len(ids)},
	} {
		work, nodes := explainWork(t, s, nil, q.sql, q.args...)
		t.Logf("fire read (%s): %d rows read: %s", name, work, nodes)
		if work > 10*q.runs || strings.Contains(nodes, "Seq Scan") {
			t.Errorf("fire read (%s) read %d rows for %d runs of %d jobs: %s", name, work, q.runs, n, nodes)
		}
	}
}

// TestGenericClaimPlanOnEmptyTable: the claim and the reap are planned
// once per connection (claimPlanning forces a generic plan), and that
// plan may be made while the tables are empty — a fresh database, a
// process started before the first burst. With the statistics of an
// empty table a generic plan once scanned both tables whole and hashed
// them for every claim; the plan made then must still find 16 runs of
// 3,000 through indexes.
func TestGenericClaimPlanOnEmptyTable(t *testing.T) {
	const n = 3000
	ctx := context.Background()
	s := openTestStore(t)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	made := []string{`EXECUTE empty_reap(500)`}
	for i, c := range claimProbes {
		if _, err := conn.Exec(ctx, `PREPARE empty_claim`+strconv.Itoa(i)+c.types+` AS `+c.sql); err != nil {
			t.Fatal(err)
		}
		made = append(made, `EXECUTE empty_claim`+strconv.Itoa(i)+strings.Replace(c.args, "'w2'", "'w0'", 1))
	}
	if _, err := conn.Exec(ctx, `PREPARE empty_reap(int) AS `+reapSQL); err != nil {
		t.Fatal(err)
	}
	// Made now, on the empty tables: the first execution of each.
	for _, q := range made {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, set := range claimPlanning {
			if _, err := tx.Exec(ctx, set); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	spec := oneOffRetrySpec
	if _, err := s.pool.Exec(ctx, `WITH d AS (INSERT INTO scheduler.schedule_details (tenant, spec, enabled)
			SELECT 't1', $1::jsonb, true FROM generate_series(1, $2) RETURNING id)
		INSERT INTO scheduler.scheduled_execution (schedule_id, scheduled_at, status, tenant, lease_expires_at)
		SELECT id, now() - interval '1 second', CASE WHEN id % 2 = 0 THEN 'QUEUED' ELSE 'RUNNING' END, 't1',
			now() + interval '1 hour' FROM d`, spec, n); err != nil {
		t.Fatal(err)
	}
	probes := map[string]struct {
		sql   string
		limit int
	}{
		// Nothing has expired: it reads the RUNNING runs' index, not the table.
		"reap": {`EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE empty_reap(500)`, 2 * n},
	}
	for i, c := range claimProbes {
		probes[c.name] = struct {
			sql   string
			limit int
		}{`EXECUTE empty_claim` + strconv.Itoa(i) + c.args, 500}
	}
	for name, probe := range probes {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, set := range claimPlanning {
			if _, err := tx.Exec(ctx, set); err != nil {
				t.Fatal(err)
			}
		}
		var raw []byte
		q := probe.sql
		if name != "reap" {
			q = `EXPLAIN (ANALYZE, FORMAT JSON) ` + q
		}
		if err := tx.QueryRow(ctx, q).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		_ = tx.Rollback(ctx)
		work, nodes := planWork(t, raw)
		t.Logf("%s (generic, planned on empty tables): %d rows read: %s", name, work, nodes)
		if work > probe.limit || strings.Contains(nodes, "Seq Scan") {
			t.Errorf("%s read %d rows: %s", name, work, nodes)
		}
	}
}

// TestReapLooksThroughTheRunningIndex: the reaper's look for an expired
// lease reads the RUNNING runs' index, not the table (planned as usual, it
// read ~550 buffers a pass in the River benchmark's burst).
func TestReapLooksThroughTheRunningIndex(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	spec := oneOffSpec
	if _, err := s.pool.Exec(ctx, `WITH d AS (INSERT INTO scheduler.schedule_details (tenant, spec, enabled)
			SELECT 't1', $1::jsonb, true FROM generate_series(1, 3000) RETURNING id)
		INSERT INTO scheduler.scheduled_execution (schedule_id, scheduled_at, status, tenant, lease_expires_at)
		SELECT id, now() - interval '1 second', CASE WHEN id <= 10 THEN 'RUNNING' ELSE 'SUCCEEDED' END, 't1',
			now() + interval '1 hour' FROM d`, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE scheduler.scheduled_execution`); err != nil {
		t.Fatal(err)
	}
	var raw []byte
	if err := s.planned.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) SELECT EXISTS (SELECT 1 FROM scheduler.scheduled_execution
		WHERE status = 'RUNNING' AND lease_expires_at < now())`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	work, nodes := planWork(t, raw)
	t.Logf("expired-lease look: %d rows read: %s", work, nodes)
	if work > 100 || strings.Contains(nodes, "Seq Scan") {
		t.Errorf("expired-lease look read %d rows: %s", work, nodes)
	}
	if r, err := s.Reap(ctx, 10); err != nil || r.Retried+r.Dead != 0 {
		t.Fatalf("reap with no expired lease: %+v, %v", r, err)
	}
}
