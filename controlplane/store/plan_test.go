package store

import (
	"errors"
	"testing"

	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/internal/testdeps"
)

// Plan reports what Apply would write and writes nothing; IfMatchUpsert
// creates or replaces whatever exists, and deleting an absent resource
// with it is no change.
func TestPlanAndUpsert(t *testing.T) {
	s := openStore(t, testdeps.Postgres(t))
	ctx := testCtx(t)
	changes := []Change{put(cluster("echo", 18900), IfMatchUpsert), put(route("echo", "echo", "/echo"), IfMatchUpsert),
		{Kind: spec.KindRoute, Name: "gone", IfMatch: IfMatchUpsert}}
	plan, err := s.Plan(ctx, changes)
	if err != nil || plan.Base != 0 || plan.Version != 0 || len(plan.Diffs) != 2 || plan.Diffs[0].Action != ActionCreate || plan.Diffs[0].Before != nil {
		t.Fatalf("plan: %+v %v", plan, err)
	}
	if v := head(t, s); v != 0 {
		t.Fatalf("Plan made version %d", v)
	}
	if _, err := s.Plan(ctx, []Change{put(route("echo", "nope", "/echo"), IfMatchUpsert)}); !errors.Is(err, spec.ErrInvalid) {
		t.Fatalf("plan of an invalid config: %v", err)
	}

	res := mustApply(t, s, changes...)
	if res.Version != 1 || res.Base != 0 || len(res.Diffs) != 2 {
		t.Fatalf("apply: %+v", res)
	}
	if _, err := s.Apply(ctx, meta, changes, nil); !errors.Is(err, ErrNoChange) {
		t.Fatalf("same changes again: %v", err)
	}
	if _, err := s.Plan(ctx, changes); !errors.Is(err, ErrNoChange) {
		t.Fatalf("plan of the same changes: %v", err)
	}
	res = mustApply(t, s, put(cluster("echo", 18901), IfMatchUpsert), Change{Kind: spec.KindRoute, Name: "echo", IfMatch: IfMatchUpsert},
		Change{Kind: spec.KindRoute, Name: "gone", IfMatch: IfMatchUpsert})
	if res.Version != 2 || res.Base != 1 || len(res.Diffs) != 2 || res.Diffs[0].Action != ActionUpdate || res.Diffs[1].Action != ActionDelete ||
		res.Diffs[1].After != nil {
		t.Fatalf("update and delete: %+v", res)
	}
}
