package shard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/shard"
	"github.com/portico-io/portico/scheduler/store"
)

func setup(t *testing.T) (*store.Store, *pgxpool.Pool) {
	t.Helper()
	url := testdeps.Postgres(t)
	st, err := store.Open(context.Background(), store.Config{DatabaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	db, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return st, db
}

func manager(t *testing.T, st *store.Store, id string) *shard.Manager {
	t.Helper()
	m, err := shard.New(shard.Config{Store: st, ID: id, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRebalanceAcrossRunners: one runner takes all 1024 shards; a second
// joins and they converge on 512 each, disjoint; when one leaves, the
// other takes everything back.
func TestRebalanceAcrossRunners(t *testing.T) {
	st, _ := setup(t)
	ctx := context.Background()
	a, b := manager(t, st, "a"), manager(t, st, "b")
	if err := a.Pass(ctx); err != nil || len(a.Held()) != store.Shards {
		t.Fatalf("alone: %d shards, %v", len(a.Held()), err)
	}
	for range 2 { // b joins (gets none: all held), a gives half back, b takes it
		for _, m := range []*shard.Manager{b, a, b} {
			if err := m.Pass(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(a.Held()) != 512 || len(b.Held()) != 512 {
		t.Fatalf("a %d, b %d shards: want 512 each", len(a.Held()), len(b.Held()))
	}
	seen := map[int16]string{}
	for _, m := range []*shard.Manager{a, b} {
		for _, h := range m.Held() {
			if o, dup := seen[h.Shard]; dup {
				t.Fatalf("shard %d held by %s and %s", h.Shard, o, m.Owner())
			}
			seen[h.Shard] = m.Owner()
		}
	}
	if err := st.LeaveRunners(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := a.Pass(ctx); err != nil || len(a.Held()) != store.Shards {
		t.Fatalf("after b left: a holds %d, %v", len(a.Held()), err)
	}
}

// TestZombieOwnerFiresNothing: runner a's shard leases lapse and b takes
// them (epoch + 1); a's fire with its old leases is refused and changes
// nothing, b's fires the due run.
func TestZombieOwnerFiresNothing(t *testing.T) {
	st, db := setup(t)
	ctx := context.Background()
	at := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	spec := &jobspec.Spec{Tenant: "t", Schedule: jobspec.Schedule{Type: jobspec.TypeOneOff, At: &at},
		Target: jobspec.Target{Type: jobspec.TargetHTTP, HTTP: &jobspec.HTTPTarget{URL: "http://127.0.0.1:9/"}}}
	if err := spec.Normalize(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	job, _, err := st.CreateJob(ctx, spec, "k", "h")
	if err != nil {
		t.Fatal(err)
	}
	a, b := manager(t, st, "a"), manager(t, st, "b")
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	stale := a.Held()
	// a stops heartbeating (paused): its membership and leases lapse.
	if _, err := db.Exec(ctx, `UPDATE scheduler.shard_lease SET expires_at = now() - interval '1 second' WHERE owner = 'a';
		UPDATE scheduler.runner_member SET expires_at = now() - interval '1 second' WHERE id = 'a'`); err != nil {
		t.Fatal(err)
	}
	if err := b.Pass(ctx); err != nil || len(b.Held()) != store.Shards {
		t.Fatalf("takeover: b holds %d, %v", len(b.Held()), err)
	}
	queue := func(store.DueRun, time.Time) store.FireDecision {
		return store.FireDecision{Status: store.StatusQueued}
	}
	if _, err := st.FireShards(ctx, "a", stale, 10, queue); !errors.Is(err, store.ErrShardsLost) {
		t.Fatalf("zombie fire: %v, want ErrShardsLost", err)
	}
	runs, _ := st.ListRuns(ctx, job.ID, 0, 10)
	if len(runs) != 1 || runs[0].Status != store.StatusScheduled {
		t.Fatalf("after the zombie's fire: %+v", runs)
	}
	res, err := st.FireShards(ctx, "b", b.Held(), 10, queue)
	if err != nil || res.Claimed != 1 {
		t.Fatalf("owner's fire: %+v %v", res, err)
	}
	// Only the shard of the job matters: a runner without it fires nothing.
	var other []store.ShardLease
	for _, h := range b.Held() {
		if int64(h.Shard) != job.ID%store.Shards {
			other = append(other, h)
		}
	}
	if _, err := db.Exec(ctx, `UPDATE scheduler.scheduled_execution SET status = 'SCHEDULED' WHERE schedule_id = $1`, job.ID); err != nil {
		t.Fatal(err)
	}
	if res, err := st.FireShards(ctx, "b", other, 10, queue); err != nil || res.Claimed != 0 {
		t.Fatalf("fire without the job's shard: %+v %v", res, err)
	}
}
