package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/internal/testdeps"
)

func openStore(t testing.TB, url string) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, Config{DatabaseURL: url, PollInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func cluster(name string, port uint32) *spec.Cluster {
	return &spec.Cluster{Name: name, Endpoints: []spec.Endpoint{{Address: "127.0.0.1", Port: port}}}
}

func route(name, clusterName, prefix string) *spec.Route {
	return &spec.Route{Name: name, Match: spec.RouteMatch{PathPrefix: prefix}, Cluster: clusterName}
}

func put(r spec.Resource, ifMatch string) Change {
	return Change{Kind: spec.KindOf(r), Name: r.ResourceName(), Resource: r, IfMatch: ifMatch}
}

var meta = Meta{Author: "test", Reason: "testing"}

func mustApply(t testing.TB, s *Store, changes ...Change) Result {
	t.Helper()
	res, err := s.Apply(testCtx(t), meta, changes, nil)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return res
}

// counts returns the row count of every store table.
func counts(t testing.TB, s *Store) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, tbl := range []string{"config_versions", "resources", "audit", "outbox", "idempotency"} {
		var n int64
		if err := s.pool.QueryRow(testCtx(t), "SELECT count(*) FROM controlplane."+tbl).Scan(&n); err != nil {
			t.Fatal(err)
		}
		out[tbl] = n
	}
	return out
}

func head(t testing.TB, s *Store) int64 {
	t.Helper()
	v, err := s.Head(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func configJSON(t testing.TB, s *Store, v int64) string {
	t.Helper()
	c, err := s.ConfigAt(testCtx(t), v)
	if err != nil {
		t.Fatalf("ConfigAt(%d): %v", v, err)
	}
	cc := *c
	cc.Version = 0
	b, err := json.Marshal(cc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCRUDAndPreconditions(t *testing.T) {
	s := openStore(t, testdeps.Postgres(t))
	ctx := testCtx(t)
	if v := head(t, s); v != 0 {
		t.Fatalf("fresh head = %d", v)
	}
	res := mustApply(t, s, put(cluster("echo", 18900), ""))
	if res.Version != 1 || res.ETags[0] != `"1"` {
		t.Fatalf("create: %+v", res)
	}
	r, tag, err := s.Get(ctx, spec.KindCluster, "echo")
	if err != nil || tag != `"1"` || r.(*spec.Cluster).Endpoints[0].Port != 18900 {
		t.Fatalf("get: %v %q %v", r, tag, err)
	}
	if _, err := s.Apply(ctx, meta, []Change{put(cluster("echo", 1), "")}, nil); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("create twice: %v", err)
	}
	if _, err := s.Apply(ctx, meta, []Change{put(cluster("echo", 2), `"7"`)}, nil); !errors.Is(err, ErrPreconditionFailed) {
		t.Fatalf("stale etag: %v", err)
	}
	if _, err := s.Apply(ctx, meta, []Change{put(cluster("nope", 2), `"1"`)}, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update missing: %v", err)
	}
	if _, err := s.Apply(ctx, meta, []Change{put(cluster("echo", 18900), `"1"`)}, nil); !errors.Is(err, ErrNoChange) {
		t.Fatalf("identical update: %v", err)
	}
	res = mustApply(t, s, put(cluster("echo", 18901), `"1"`))
	if res.Version != 2 || res.ETags[0] != `"2"` {
		t.Fatalf("update: %+v", res)
	}
	res = mustApply(t, s, put(cluster("echo", 18902), IfMatchAny))
	if res.Version != 3 {
		t.Fatalf("update with *: %+v", res)
	}
	del := Change{Kind: spec.KindCluster, Name: "echo", IfMatch: `"3"`}
	if res = mustApply(t, s, del); res.Version != 4 || res.ETags[0] != "" {
		t.Fatalf("delete: %+v", res)
	}
	if _, _, err := s.Get(ctx, spec.KindCluster, "echo"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
	if _, err := s.Apply(ctx, meta, []Change{del}, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	// Re-creating a deleted resource is a create.
	if res = mustApply(t, s, put(cluster("echo", 1), "")); res.ETags[0] != `"5"` {
		t.Fatalf("recreate: %+v", res)
	}
	// Mismatched kind and name are refused before any write.
	var fe *spec.FieldError
	if _, err := s.Apply(ctx, meta, []Change{{Kind: spec.KindRoute, Name: "echo", Resource: cluster("echo", 1)}}, nil); !errors.As(err, &fe) {
		t.Fatalf("kind mismatch: %v", err)
	}
	if _, err := s.Apply(ctx, meta, []Change{{Kind: spec.KindCluster, Name: "other", Resource: cluster("echo", 1)}}, nil); !errors.As(err, &fe) || fe.Field != "name" {
		t.Fatalf("name mismatch: %v", err)
	}
}

func TestListPagination(t *testing.T) {
	s := openStore(t, testdeps.Postgres(t))
	var changes []Change
	for i := range 25 {
		changes = append(changes, put(cluster(fmt.Sprintf("c%02d", i), uint32(1000+i)), ""))
	}
	mustApply(t, s, changes...)
	mustApply(t, s, Change{Kind: spec.KindCluster, Name: "c03", IfMatch: IfMatchAny})
	var names []string
	cursor := ""
	for pages := 0; ; pages++ {
		items, next, err := s.List(testCtx(t), spec.KindCluster, cursor, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			names = append(names, it.Resource.ResourceName())
		}
		if next == "" {
			if pages != 2 {
				t.Fatalf("want 3 pages, got %d", pages+1)
			}
			break
		}
		cursor = next
	}
	if len(names) != 24 || !slices.IsSorted(names) || slices.Contains(names, "c03") {
		t.Fatalf("listed %v", names)
	}
}

func TestConcurrentApplyIsGapless(t *testing.T) {
	s := openStore(t, testdeps.Postgres(t))
	const workers, each = 8, 12
	var (
		mu       sync.Mutex
		versions []int64
		wg       sync.WaitGroup
		errs     = make(chan error, workers)
	)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				c := cluster(fmt.Sprintf("w%d-%d", w, i), uint32(1+i))
				res, err := s.Apply(context.Background(), meta, []Change{put(c, "")}, nil)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				versions = append(versions, res.Version)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	slices.Sort(versions)
	for i, v := range versions {
		if v != int64(i+1) {
			t.Fatalf("versions not gapless and unique: %v", versions)
		}
	}
	if h := head(t, s); h != workers*each {
		t.Fatalf("head = %d", h)
	}
	c := counts(t, s)
	if c["config_versions"] != workers*each || c["resources"] != workers*each || c["outbox"] != workers*each {
		t.Fatalf("counts: %v", c)
	}
	cfg, err := s.ConfigAt(testCtx(t), workers*each)
	if err != nil || len(cfg.Clusters) != workers*each {
		t.Fatalf("config at head: %v", err)
	}
}

func TestConfigAtOldVersions(t *testing.T) {
	s := openStore(t, testdeps.Postgres(t))
	mustApply(t, s, put(cluster("a", 1), ""))                // 1
	mustApply(t, s, put(route("r", "a", "/r"), ""))          // 2
	mustApply(t, s, put(cluster("a", 2), `"1"`))             // 3
	mustApply(t, s, Change{Kind: spec.KindRoute, Name: "r"}) // 4
	ctx := testCtx(t)
	for v, want := range map[int64]struct {
		port   uint32
		routes int
	}{1: {1, 0}, 2: {1, 1}, 3: {2, 1}, 4: {2, 0}} {
		// A second store has a cold cache, so both code paths are covered.
		for _, st := range []*Store{s, openStore(t, s.cfg.DatabaseURL)} {
			c, err := st.ConfigAt(ctx, v)
			if err != nil {
				t.Fatal(err)
			}
			if c.Version != v || c.Clusters["a"].Endpoints[0].Port != want.port || len(c.Routes) != want.routes {
				t.Fatalf("version %d: %+v", v, c)
			}
		}
	}
	if c, err := s.ConfigAt(ctx, 0); err != nil || len(c.Clusters) != 0 {
		t.Fatalf("version 0: %v %v", c, err)
	}
	if _, err := s.ConfigAt(ctx, 5); !errors.Is(err, ErrNotFound) {
		t.Fatalf("future version: %v", err)
	}
}

func TestRollbackReproducesOldVersion(t *testing.T) {
	s := openStore(t, testdeps.Postgres(t))
	ctx := testCtx(t)
	mustApply(t, s, put(cluster("a", 1), ""), put(cluster("b", 2), ""))                                                              // 1
	mustApply(t, s, put(route("r", "a", "/r"), ""), put(cluster("d", 4), ""), put(&spec.Consumer{Name: "acme", Tenant: "acme"}, "")) // 2
	target := head(t, s)
	mustApply(t, s, put(route("r", "b", "/r"), `"2"`))             // 3: update
	mustApply(t, s, put(route("q", "b", "/q"), ""))                // 4: create
	mustApply(t, s, Change{Kind: spec.KindCluster, Name: "d"})     // 5: delete
	mustApply(t, s, put(cluster("c", 3), ""))                      // 6: unrelated create
	mustApply(t, s, Change{Kind: spec.KindConsumer, Name: "acme"}) // 7: an identity goes
	before := counts(t, s)

	res, err := s.Rollback(ctx, Meta{Author: "oncall", Reason: "bad deploy"}, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Version != 8 {
		t.Fatalf("rollback version = %d", res.Version)
	}
	// The content is version 2's, except identities and credentials, which
	// keep the head's: acme stays deleted.
	want, err := s.ConfigAt(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	want.Consumers.Delete("acme")
	wantJSON, _ := json.Marshal(spec.Config{Clusters: want.Clusters, Routes: want.Routes, JWTProviders: want.JWTProviders,
		Consumers: want.Consumers, APIKeys: want.APIKeys, Revocations: want.Revocations, RateLimitRules: want.RateLimitRules,
		Secrets: want.Secrets, Listeners: want.Listeners, RedisProxies: want.RedisProxies})
	if got := configJSON(t, s, res.Version); got != string(wantJSON) {
		t.Fatalf("rollback content differs:\n got %s\nwant %s", got, wantJSON)
	}
	// A cold replica rebuilds the same bytes from the table.
	if got := configJSON(t, openStore(t, s.cfg.DatabaseURL), res.Version); got != string(wantJSON) {
		t.Fatalf("cold rollback content differs:\n got %s\nwant %s", got, wantJSON)
	}
	after := counts(t, s)
	// r reverted, q deleted, d recreated, c deleted: four rows, not a copy.
	if d := after["resources"] - before["resources"]; d != 4 {
		t.Fatalf("rollback wrote %d resource rows, want 4", d)
	}
	v, err := s.Version(ctx, res.Version)
	if err != nil {
		t.Fatal(err)
	}
	if v.RollbackOf == nil || *v.RollbackOf != target || v.Author != "oncall" || len(v.Changes) != 4 {
		t.Fatalf("version info: %+v", v)
	}
	for _, c := range v.Changes {
		if c.Action != ActionRollback {
			t.Fatalf("change action %q", c.Action)
		}
	}
	// Rolling back to what the head already is still records a version.
	res2, err := s.Rollback(ctx, meta, target, nil)
	if err != nil || res2.Version != 9 {
		t.Fatalf("no-op rollback: %+v %v", res2, err)
	}
	if _, err := s.Rollback(ctx, meta, 99, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("rollback to unknown version: %v", err)
	}
}

func TestInvalidChangeChangesNothing(t *testing.T) {
	s := openStore(t, testdeps.Postgres(t))
	ctx := testCtx(t)
	mustApply(t, s, put(cluster("a", 1), ""), put(route("r", "a", "/r"), ""), put(&spec.Consumer{Name: "acme", Tenant: "acme"}, ""))
	mustApply(t, s, put(&spec.APIKey{Name: "k1", Consumer: "acme", SHA256: hashOf("k1")}, ""))
	h, before := head(t, s), counts(t, s)

	cases := map[string]struct {
		changes []Change
		field   string
		code    string
	}{
		"unknown cluster":           {[]Change{put(route("x", "missing", "/x"), "")}, "routes/x: cluster", spec.CodeUnknownRef},
		"delete referenced cluster": {[]Change{{Kind: spec.KindCluster, Name: "a", IfMatch: IfMatchAny}}, "routes/r: cluster", spec.CodeUnknownRef},
		"delete consumer with keys": {[]Change{{Kind: spec.KindConsumer, Name: "acme", IfMatch: IfMatchAny}}, "apikeys/k1: consumer", spec.CodeUnknownRef},
		"conflicting match":         {[]Change{put(route("r2", "a", "/r"), "")}, "routes/r2: match", spec.CodeConflict},
		"invalid resource":          {[]Change{put(&spec.RateLimitRule{Name: "z", Domain: "d", Descriptors: []spec.RuleDescriptor{{Key: "k"}}, Window: spec.Duration(time.Second)}, "")}, "limit", spec.CodeInvalid},
		"partly valid set":          {[]Change{put(cluster("b", 2), ""), put(route("y", "nope", "/y"), "")}, "routes/y: cluster", spec.CodeUnknownRef},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := s.Apply(ctx, meta, tc.changes, nil)
			var fe *spec.FieldError
			if !errors.As(err, &fe) || !errors.Is(err, spec.ErrInvalid) {
				t.Fatalf("want a field error, got %v", err)
			}
			if fe.Field != tc.field || fe.Code != tc.code {
				t.Fatalf("field error %+v, want %s/%s", fe, tc.field, tc.code)
			}
			if head(t, s) != h {
				t.Fatal("head moved")
			}
			if got := counts(t, s); !equalCounts(got, before) {
				t.Fatalf("tables changed: %v -> %v", before, got)
			}
		})
	}
	// The cached head config was not polluted by the rejected drafts.
	c, err := s.ConfigAt(ctx, h)
	if err != nil || len(c.Routes) != 1 || len(c.Clusters) != 1 {
		t.Fatalf("head config after rejections: %+v %v", c, err)
	}
}

func equalCounts(a, b map[string]int64) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return len(a) == len(b)
}

func hashOf(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestIdempotency(t *testing.T) {
	s := openStore(t, testdeps.Postgres(t))
	ctx := testCtx(t)
	idem := &Idempotency{Key: "k-1", Method: "POST", Path: "/admin/v1/clusters", RequestHash: "h1"}
	m := Meta{Author: "a", Idempotency: idem}
	calls := 0
	respond := func(v int64) (int, []byte) {
		calls++
		return 201, fmt.Appendf(nil, `{"version":%d}`, v)
	}
	res, err := s.Apply(ctx, m, []Change{put(cluster("a", 1), "")}, respond)
	if err != nil || res.Replayed || res.Version != 1 || calls != 1 {
		t.Fatalf("first: %+v %v", res, err)
	}
	before := counts(t, s)
	// Same key, same request: the recorded response, nothing written, even
	// though the create would now fail with "already exists".
	res, err = s.Apply(ctx, m, []Change{put(cluster("a", 1), "")}, respond)
	if err != nil || !res.Replayed || res.Status != 201 || string(res.Body) != `{"version":1}` || res.Version != 1 || calls != 1 {
		t.Fatalf("replay: %+v %v", res, err)
	}
	if got := counts(t, s); !equalCounts(got, before) {
		t.Fatalf("replay wrote: %v -> %v", before, got)
	}
	// Same key, different request.
	other := *idem
	other.RequestHash = "h2"
	if _, err := s.Apply(ctx, Meta{Idempotency: &other}, []Change{put(cluster("b", 1), "")}, respond); !errors.Is(err, ErrIdempotencyMismatch) {
		t.Fatalf("reuse: %v", err)
	}
	// A rejected change records nothing, so the key stays usable.
	bad := &Idempotency{Key: "k-2", Method: "POST", Path: "/admin/v1/routes", RequestHash: "h"}
	if _, err := s.Apply(ctx, Meta{Idempotency: bad}, []Change{put(route("r", "nope", "/"), "")}, respond); !errors.Is(err, spec.ErrInvalid) {
		t.Fatalf("invalid: %v", err)
	}
	bad.RequestHash = "fixed"
	if res, err := s.Apply(ctx, Meta{Idempotency: bad}, []Change{put(route("r", "a", "/"), "")}, respond); err != nil || res.Replayed {
		t.Fatalf("after rejection: %+v %v", res, err)
	}
	if n, err := s.PruneIdempotency(ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("prune: %d %v", n, err)
	}
}

func TestWatchSeesOtherReplica(t *testing.T) {
	url := testdeps.Postgres(t)
	a, b := openStore(t, url), openStore(t, url)
	mustApply(t, a, put(cluster("a", 1), ""))
	ctx := testCtx(t)
	wctx, cancel := context.WithCancel(ctx)
	ch := b.Watch(wctx)
	waitVersion(t, ch, 1) // the head when the watch started
	for i := range 5 {
		res := mustApply(t, a, put(cluster(fmt.Sprintf("n%d", i), 1), ""))
		waitVersion(t, ch, res.Version)
		// b's view of the head follows without re-reading everything.
		c, err := b.ConfigAt(ctx, res.Version)
		if err != nil || len(c.Clusters) != i+2 {
			t.Fatalf("replica config at %d: %v", res.Version, err)
		}
	}
	var undelivered int
	if err := a.pool.QueryRow(ctx, "SELECT count(*) FROM controlplane.outbox WHERE delivered_at IS NULL").Scan(&undelivered); err != nil {
		t.Fatal(err)
	}
	if undelivered != 0 {
		t.Fatalf("%d outbox rows not marked delivered", undelivered)
	}
	cancel()
	for range ch { // closes once the watch stops
	}
}

func TestAPIKeysAreNotCopiedPerVersion(t *testing.T) {
	s := openStore(t, testdeps.Postgres(t))
	ctx := testCtx(t)
	mustApply(t, s, put(&spec.Consumer{Name: "acme", Tenant: "acme"}, ""), put(&spec.Consumer{Name: "other", Tenant: "other"}, ""))
	const n = 10000
	changes := make([]Change, 0, n)
	for i := range n {
		changes = append(changes, put(&spec.APIKey{Name: fmt.Sprintf("key%05d", i), Consumer: "acme", SHA256: hashOf(fmt.Sprint(i)), Prefix: "pk_abcde"}, ""))
	}
	mustApply(t, s, changes...)
	if _, err := s.CreateAPIKey(ctx, meta, &spec.APIKey{Name: "solo", Consumer: "other", SHA256: hashOf("solo")}, nil); err != nil {
		t.Fatal(err)
	}
	before := counts(t, s)
	res := mustApply(t, s, put(&spec.APIKey{Name: "key00042", Consumer: "acme", SHA256: hashOf("rotated"), Prefix: "pk_abcde"}, `"2"`))
	after := counts(t, s)
	var rows int64
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM controlplane.resources WHERE version_from = $1", res.Version).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || after["resources"]-before["resources"] != 1 || after["audit"]-before["audit"] != 1 {
		t.Fatalf("changing one of %d keys wrote %d rows (%v -> %v)", n, rows, before, after)
	}
	c, err := s.ConfigAt(ctx, res.Version)
	if err != nil || c.APIKeys.Len() != n+1 || c.APIKeys.Lookup("key00042").SHA256 != hashOf("rotated") {
		t.Fatalf("config at head: %v", err)
	}
	old, err := s.ConfigAt(ctx, res.Version-1)
	if err != nil || old.APIKeys.Lookup("key00042").SHA256 != hashOf("42") {
		t.Fatalf("config before: %v", err)
	}
	items, next, err := s.ListAPIKeys(ctx, "other", "", 10)
	if err != nil || len(items) != 1 || next != "" || items[0].Resource.ResourceName() != "solo" {
		t.Fatalf("list other's keys: %v %q %v", items, next, err)
	}
	items, next, err = s.ListAPIKeys(ctx, "acme", "key09990", 0)
	if err != nil || len(items) != 9 || next != "" {
		t.Fatalf("list acme's last keys: %d %q %v", len(items), next, err)
	}
}

func TestConcurrentOpenMigratesOnce(t *testing.T) {
	url := testdeps.Postgres(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			s, err := Open(context.Background(), Config{DatabaseURL: url})
			if err != nil {
				errs <- err
				return
			}
			s.Close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s := openStore(t, url)
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.pool.QueryRow(testCtx(t), "SELECT count(*) FROM controlplane.schema_migrations").Scan(&n); err != nil || n != len(files) {
		t.Fatalf("migrations recorded: %d of %d (%v)", n, len(files), err)
	}
}

func TestAuditNeverHoldsSecrets(t *testing.T) {
	s := openStore(t, testdeps.Postgres(t))
	ctx := testCtx(t)
	mustApply(t, s, put(&spec.Consumer{Name: "acme", Tenant: "acme"}, ""))
	mustApply(t, s, put(&spec.APIKey{Name: "k", Consumer: "acme", SHA256: hashOf("pk_secret")}, ""))
	mustApply(t, s, put(&spec.Consumer{Name: "acme", Tenant: "acme", Tier: "pro"}, `"1"`))
	items, next, err := s.Audit(ctx, 0, 2)
	if err != nil || len(items) != 2 || next == 0 {
		t.Fatalf("audit page 1: %v %d %v", items, next, err)
	}
	if items[0].Action != ActionUpdate || items[0].Kind != spec.KindConsumer || items[1].Action != ActionCreate || items[1].Kind != spec.KindAPIKey {
		t.Fatalf("audit order: %+v", items)
	}
	var diff struct{ Before, After map[string]any }
	if err := json.Unmarshal(items[0].Diff, &diff); err != nil || diff.Before["tier"] != nil || diff.After["tier"] != "pro" {
		t.Fatalf("diff: %s %v", items[0].Diff, err)
	}
	rest, next, err := s.Audit(ctx, next, 10)
	if err != nil || len(rest) != 1 || next != 0 || rest[0].Author != "test" {
		t.Fatalf("audit page 2: %v %d %v", rest, next, err)
	}
	var hits int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM controlplane.audit WHERE diff::text LIKE '%pk_secret%'").Scan(&hits); err != nil || hits != 0 {
		t.Fatalf("secret in audit: %d %v", hits, err)
	}
	vs, next, err := s.Versions(ctx, 0, 2)
	if err != nil || len(vs) != 2 || vs[0].Version != 3 || next != 2 {
		t.Fatalf("versions: %+v %d %v", vs, next, err)
	}
}

// waitVersion reads ch until want arrives (values may be coalesced).
func waitVersion(t *testing.T, ch <-chan int64, want int64) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case v, ok := <-ch:
			if !ok {
				t.Fatal("watch closed")
			}
			if v == want {
				return
			}
			if v > want {
				t.Fatalf("got %d, want %d", v, want)
			}
		case <-deadline:
			t.Fatalf("version %d not delivered", want)
		}
	}
}

func TestWatchPollsWhenNotificationsAreLost(t *testing.T) {
	url := testdeps.Postgres(t)
	s, err := Open(testCtx(t), Config{DatabaseURL: url, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ch := s.Watch(testCtx(t))
	waitVersion(t, ch, 0)

	// A version whose NOTIFY never arrives (written without one) is still
	// seen by the poll.
	if _, err := s.pool.Exec(testCtx(t), `INSERT INTO controlplane.config_versions (version, author) VALUES (1, 'test');
		UPDATE controlplane.config_head SET version = 1`); err != nil {
		t.Fatal(err)
	}
	waitVersion(t, ch, 1)

	// The LISTEN connection dies: the watch reconnects and keeps delivering.
	var killed int
	err = s.pool.QueryRow(testCtx(t), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query = 'LISTEN `+NotifyChannel+`'`).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminated %d listeners: %v", killed, err)
	}
	res := mustApply(t, s, put(cluster("after-reconnect", 1), ""))
	waitVersion(t, ch, res.Version)
	res = mustApply(t, s, put(cluster("after-reconnect-2", 1), ""))
	waitVersion(t, ch, res.Version)
}

func TestWatchStopsOnClose(t *testing.T) {
	s, err := Open(testCtx(t), Config{DatabaseURL: testdeps.Postgres(t)})
	if err != nil {
		t.Fatal(err)
	}
	ch := s.Watch(context.Background())
	waitVersion(t, ch, 0)
	s.Close() // waits for the watch goroutine
	if _, ok := <-ch; ok {
		t.Fatal("watch still open after Close")
	}
	if _, err := s.Apply(context.Background(), meta, []Change{put(cluster("a", 1), "")}, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("apply after close: %v", err)
	}
}

func TestSecretInUseCannotBeDeleted(t *testing.T) {
	s := openStore(t, testdeps.Postgres(t))
	ctx := testCtx(t)
	gw := &spec.Secret{Name: "gw", Type: spec.SecretTLS, Files: &spec.SecretFiles{CertificateChain: "/c.pem", PrivateKey: "/k.pem"}}
	https := &spec.Listener{Name: "https", Port: 10443, TLS: &spec.ListenerTLS{Certificates: []string{"gw"}}}
	mustApply(t, s, put(gw, ""), put(https, ""))
	h := head(t, s)
	_, err := s.Apply(ctx, meta, []Change{{Kind: spec.KindSecret, Name: "gw", IfMatch: IfMatchAny}}, nil)
	var fe *spec.FieldError
	if !errors.As(err, &fe) || fe.Code != spec.CodeInUse || fe.Field != "secrets/gw" || !strings.Contains(fe.Message, "listeners/https") {
		t.Fatalf("delete in-use secret: %v", err)
	}
	if head(t, s) != h {
		t.Fatal("head moved")
	}
	// Deleting the user in the same change set is fine.
	mustApply(t, s, Change{Kind: spec.KindListener, Name: "https", IfMatch: IfMatchAny}, Change{Kind: spec.KindSecret, Name: "gw", IfMatch: IfMatchAny})
	c, err := s.ConfigAt(ctx, head(t, s))
	if err != nil || len(c.Secrets) != 0 || len(c.Listeners) != 0 {
		t.Fatalf("after delete: %+v %v", c, err)
	}
	// Older versions still hold them (rollback material).
	if c, err := s.ConfigAt(ctx, h); err != nil || c.Secrets["gw"] == nil || c.Listeners["https"] == nil {
		t.Fatalf("version %d: %v", h, err)
	}
}

func TestCheckHookRejectsWrites(t *testing.T) {
	url := testdeps.Postgres(t)
	s, err := Open(testCtx(t), Config{DatabaseURL: url, Check: func(c *spec.Config) error {
		if l, ok := c.Listeners["clash"]; ok && l.Port == 10000 {
			return &spec.FieldError{Field: "listeners/clash: port", Code: spec.CodeConflict, Message: "taken"}
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	_, err = s.Apply(testCtx(t), meta, []Change{put(&spec.Listener{Name: "clash", Port: 10000}, "")}, nil)
	var fe *spec.FieldError
	if !errors.As(err, &fe) || fe.Field != "listeners/clash: port" || head(t, s) != 0 {
		t.Fatalf("Check: %v", err)
	}
	mustApply(t, s, put(&spec.Listener{Name: "clash", Port: 10001}, ""))
}
