package workerapi_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portico-io/portico/internal/grpcserver"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlstest"
	schedulerv1 "github.com/portico-io/portico/proto/portico/scheduler/v1"
	"github.com/portico-io/portico/scheduler/jobspec"
	"github.com/portico-io/portico/scheduler/metrics"
	"github.com/portico-io/portico/scheduler/store"
	"github.com/portico-io/portico/scheduler/workerapi"
)

// logBuffer collects the service's log lines; safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// fixture is a worker API over a fresh database, served by real gRPC:
// mutual TLS admitting role worker (as scheduler.Run serves it), or
// plaintext.
type fixture struct {
	st   *store.Store
	db   *pgxpool.Pool
	addr string
	ca   *tlstest.PKI // nil: plaintext
	m    *metrics.Metrics
	logs *logBuffer
}

func start(t *testing.T, mtls bool) *fixture {
	t.Helper()
	ctx := context.Background()
	url := testdeps.Postgres(t)
	st, err := store.Open(ctx, store.Config{DatabaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	f := &fixture{st: st, db: db, m: metrics.New(prometheus.NewRegistry()), logs: &logBuffer{}}
	var opts []grpc.ServerOption
	if mtls {
		f.ca = tlstest.New(t)
		files := f.ca.Load(t, identity.Scheduler, "scheduler")
		opts = append(opts, grpc.Creds(credentials.NewTLS(files.ServerConfig(identity.Policy{Roles: []identity.Role{identity.Worker}}))))
	}
	svc, err := workerapi.New(workerapi.Config{Store: st, Metrics: f.m, RequireIdentity: mtls,
		Logger: slog.New(slog.NewTextHandler(f.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = lis.Addr().String()
	gs := grpcserver.New(opts...)
	schedulerv1.RegisterWorkerServiceServer(gs, svc)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- gs.Serve(sctx, lis, 0) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return f
}

// client connects as the worker name (its certificate's SPIFFE ID is
// spiffe://<trust domain>/worker/<name>); without mTLS, in plaintext.
func (f *fixture) client(t *testing.T, name string) schedulerv1.WorkerServiceClient {
	t.Helper()
	creds := insecure.NewCredentials()
	if f.ca != nil {
		w := f.ca.Load(t, identity.Worker, name)
		creds = credentials.NewTLS(w.ClientConfig(identity.Policy{Roles: []identity.Role{identity.Scheduler}}))
	}
	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return schedulerv1.NewWorkerServiceClient(conn)
}

// queue creates n one-off jobs due in the past and fires them (QUEUED).
func (f *fixture) queue(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	guard, err := jobspec.NewGuard("127.0.0.0/8", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		spec, err := jobspec.Decode(strings.NewReader(`{"tenant":"acme","schedule":{"type":"ONE_OFF","at":"2020-01-01T00:00:00Z"},
			"target":{"type":"HTTP","http":{"url":"http://127.0.0.1:9/hook"}},
			"execution":{"timeoutSeconds":5,"retry":{"maxAttempts":5,"initialBackoffMs":1,"maxBackoffMs":1}}}`))
		if err != nil {
			t.Fatal(err)
		}
		if err := spec.Normalize(context.Background(), guard); err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.st.CreateJob(ctx, spec, fmt.Sprint(t.Name(), i, time.Now().UnixNano()), "h"); err != nil {
			t.Fatal(err)
		}
	}
	res, err := f.st.Fire(ctx, 100, func(store.DueRun, time.Time) store.FireDecision {
		return store.FireDecision{Status: store.StatusQueued}
	})
	if err != nil || res.Claimed != n {
		t.Fatalf("fire: %+v %v", res, err)
	}
}

// lease leases up to n runs; they must be ready.
func lease(t *testing.T, wc schedulerv1.WorkerServiceClient, n int32) []*schedulerv1.LeasedRun {
	t.Helper()
	resp, err := wc.Lease(context.Background(), &schedulerv1.LeaseRequest{WorkerId: "w", MaxRuns: n, Lease: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatalf("Lease: %v", err)
	}
	if len(resp.Runs) == 0 {
		t.Fatal("Lease: nothing ready")
	}
	return resp.Runs
}

func heartbeat(wc schedulerv1.WorkerServiceClient, runID int64, secret []byte) error {
	_, err := wc.Heartbeat(context.Background(), &schedulerv1.HeartbeatRequest{RunId: runID, LeaseSecret: secret})
	return err
}

func complete(wc schedulerv1.WorkerServiceClient, runID int64, secret []byte) (*schedulerv1.CompleteResponse, error) {
	return wc.Complete(context.Background(), &schedulerv1.CompleteRequest{RunId: runID, LeaseSecret: secret,
		Outcome: schedulerv1.Outcome_OUTCOME_SUCCEEDED})
}

// leaseLost fails unless err is the one answer every caller that does not
// prove a lease gets: FAILED_PRECONDITION, reason LEASE_LOST, and the same
// message.
func leaseLost(t *testing.T, what string, err error) {
	t.Helper()
	st := status.Convert(err)
	reason := ""
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			reason = info.Reason
		}
	}
	if st.Code() != codes.FailedPrecondition || reason != workerapi.ReasonLeaseLost || st.Message() != "lease token is not current: LEASE_LOST" {
		t.Fatalf("%s: %v (reason %q), want FAILED_PRECONDITION LEASE_LOST", what, err, reason)
	}
}

// refused reads portico_scheduler_worker_calls_refused_total{rpc, reason}.
func (f *fixture) refused(t *testing.T, rpc, reason string) float64 {
	t.Helper()
	var m dto.Metric
	if err := f.m.WorkerRefused.WithLabelValues(rpc, reason).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func (f *fixture) status(t *testing.T, runID int64) (status string, attempt int) {
	t.Helper()
	if err := f.db.QueryRow(context.Background(), `SELECT status, attempt FROM scheduler.scheduled_execution WHERE id = $1`, runID).
		Scan(&status, &attempt); err != nil {
		t.Fatal(err)
	}
	return status, attempt
}

// TestGuessedLeaseSecretRefused: a lease's secret is 16 random bytes; the
// old counter (the run's lease_token as bytes), the secret plus one, or
// another run's secret prove nothing; every refusal is counted, logged
// with the run and the caller but never a secret, and changes nothing.
func TestGuessedLeaseSecretRefused(t *testing.T) {
	f := start(t, true)
	f.queue(t, 2)
	wc := f.client(t, "remote-1")
	runs := lease(t, wc, 2)
	if len(runs) != 2 {
		t.Fatalf("leased %d runs", len(runs))
	}
	r, other := runs[0], runs[1]
	if len(r.LeaseSecret) != store.LeaseSecretLen || bytes.Equal(r.LeaseSecret, other.LeaseSecret) {
		t.Fatalf("secrets %x, %x", r.LeaseSecret, other.LeaseSecret)
	}
	var counter int64
	if err := f.db.QueryRow(context.Background(), `SELECT lease_token FROM scheduler.scheduled_execution WHERE id = $1`, r.RunId).
		Scan(&counter); err != nil {
		t.Fatal(err)
	}
	incremented := bytes.Clone(r.LeaseSecret)
	incremented[len(incremented)-1]++
	asCounter := make([]byte, store.LeaseSecretLen)
	binary.BigEndian.PutUint64(asCounter[8:], uint64(counter))
	guesses := map[string][]byte{"incremented": incremented, "the counter": asCounter,
		"next counter":         binary.BigEndian.AppendUint64(make([]byte, 8), uint64(counter+1)),
		"another run's secret": other.LeaseSecret}
	for what, g := range guesses {
		leaseLost(t, "heartbeat with "+what, heartbeat(wc, r.RunId, g))
		_, err := complete(wc, r.RunId, g)
		leaseLost(t, "complete with "+what, err)
	}
	if hb, c := f.refused(t, "heartbeat", store.RefusedToken), f.refused(t, "complete", store.RefusedToken); hb != 4 || c != 4 {
		t.Fatalf("refusals counted: heartbeat %v, complete %v; want 4 each", hb, c)
	}
	if s, attempt := f.status(t, r.RunId); s != store.StatusRunning || attempt != 1 {
		t.Fatalf("refused calls changed the run: %s attempt %d", s, attempt)
	}
	logs := f.logs.String()
	if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "run_id="+strconv.FormatInt(r.RunId, 10)) ||
		!strings.Contains(logs, "caller=spiffe://"+identity.DefaultTrustDomain+"/worker/remote-1") || !strings.Contains(logs, "reason=token") {
		t.Fatalf("refusals not logged at warn with run and caller:\n%s", logs)
	}
	for _, s := range append([][]byte{r.LeaseSecret}, incremented, other.LeaseSecret) {
		for _, enc := range []string{hex.EncodeToString(s), base64.StdEncoding.EncodeToString(s), base64.RawURLEncoding.EncodeToString(s),
			string(s)} {
			if strings.Contains(logs, enc) {
				t.Fatalf("a secret reached the logs:\n%s", logs)
			}
		}
	}
	// The holder's own calls still work.
	if err := heartbeat(wc, r.RunId, r.LeaseSecret); err != nil {
		t.Fatalf("heartbeat with the secret: %v", err)
	}
	// Malformed secrets are bad input, not a lease question.
	for _, bad := range [][]byte{nil, r.LeaseSecret[:8], append(bytes.Clone(r.LeaseSecret), 0)} {
		if st := status.Convert(heartbeat(wc, r.RunId, bad)); st.Code() != codes.InvalidArgument {
			t.Fatalf("heartbeat with a %d-byte secret: %v", len(bad), st.Err())
		}
	}
}

// TestLeaseBoundToWorkerIdentity: the right secret from another worker
// identity is refused with exactly the answer a run that does not exist
// gets; the worker that leased the run heartbeats and completes it.
func TestLeaseBoundToWorkerIdentity(t *testing.T) {
	f := start(t, true)
	f.queue(t, 1)
	first, second := f.client(t, "remote-1"), f.client(t, "remote-2")
	r := lease(t, first, 1)[0]
	var leasedBy string
	if err := f.db.QueryRow(context.Background(), `SELECT leased_by FROM scheduler.scheduled_execution WHERE id = $1`, r.RunId).
		Scan(&leasedBy); err != nil || leasedBy != "spiffe://"+identity.DefaultTrustDomain+"/worker/remote-1" {
		t.Fatalf("leased_by %q, %v", leasedBy, err)
	}

	leaseLost(t, "another identity's heartbeat", heartbeat(second, r.RunId, r.LeaseSecret))
	_, err := complete(second, r.RunId, r.LeaseSecret)
	leaseLost(t, "another identity's complete", err)
	_, err = second.Complete(context.Background(), &schedulerv1.CompleteRequest{RunId: r.RunId, LeaseSecret: r.LeaseSecret,
		Outcome: schedulerv1.Outcome_OUTCOME_FATAL, Message: "sabotage"})
	leaseLost(t, "another identity's FATAL", err)
	// Indistinguishable from a run that does not exist.
	leaseLost(t, "heartbeat of no run", heartbeat(second, r.RunId+1000, r.LeaseSecret))
	if hb, c := f.refused(t, "heartbeat", store.RefusedIdentity), f.refused(t, "complete", store.RefusedIdentity); hb != 1 || c != 2 {
		t.Fatalf("identity refusals counted: heartbeat %v, complete %v", hb, c)
	}
	if logs := f.logs.String(); !strings.Contains(logs, "caller=spiffe://"+identity.DefaultTrustDomain+"/worker/remote-2") ||
		!strings.Contains(logs, "reason=identity") || !strings.Contains(logs, "run_id="+strconv.FormatInt(r.RunId, 10)) {
		t.Fatalf("identity refusal not logged:\n%s", logs)
	}
	if s, _ := f.status(t, r.RunId); s != store.StatusRunning {
		t.Fatalf("another identity's calls changed the run: %s", s)
	}

	if err := heartbeat(first, r.RunId, r.LeaseSecret); err != nil {
		t.Fatalf("the holder's heartbeat: %v", err)
	}
	res, err := complete(first, r.RunId, r.LeaseSecret)
	if err != nil || res.Status != store.StatusSucceeded {
		t.Fatalf("the holder's complete: %v %v", res, err)
	}
	_, err = complete(first, r.RunId, r.LeaseSecret)
	leaseLost(t, "a second complete", err)
}

// TestLeaseSecretAfterTakeover: a lease that expired and was reaped, then
// leased again (by the same worker identity), has a new secret; the old
// one is refused for heartbeat and completion, and the new lease
// completes.
func TestLeaseSecretAfterTakeover(t *testing.T) {
	f := start(t, true)
	f.queue(t, 1)
	ctx := context.Background()
	wc := f.client(t, "remote-1")
	zombie := lease(t, wc, 1)[0]
	// The zombie stops heartbeating; its lease runs out and the reaper
	// takes the run back (the expiry is set, not waited for).
	if _, err := f.db.Exec(ctx, `UPDATE scheduler.scheduled_execution SET lease_expires_at = now() - interval '1 second'
		WHERE id = $1`, zombie.RunId); err != nil {
		t.Fatal(err)
	}
	if res, err := f.st.Reap(ctx, 10); err != nil || res.Retried != 1 {
		t.Fatalf("reap: %+v %v", res, err)
	}
	// Reaped, not yet re-leased: the holder of the lapsed lease learns it
	// lost it (no refusal: it proved who it is).
	leaseLost(t, "heartbeat of a reaped lease", heartbeat(wc, zombie.RunId, zombie.LeaseSecret))
	if n := f.refused(t, "heartbeat", store.RefusedToken); n != 0 {
		t.Fatalf("a lapsed lease's holder counted as a refusal: %v", n)
	}
	// Ready again now (the reaper's backoff, at most 1 ms here, is not waited for).
	if _, err := f.db.Exec(ctx, `UPDATE scheduler.scheduled_execution SET next_attempt_at = NULL WHERE id = $1`, zombie.RunId); err != nil {
		t.Fatal(err)
	}
	again := lease(t, wc, 1)[0]
	if again.RunId != zombie.RunId || again.Attempt != 2 || bytes.Equal(again.LeaseSecret, zombie.LeaseSecret) {
		t.Fatalf("re-lease %v after %v", again, zombie)
	}
	leaseLost(t, "the zombie's heartbeat", heartbeat(wc, zombie.RunId, zombie.LeaseSecret))
	_, err := complete(wc, zombie.RunId, zombie.LeaseSecret)
	leaseLost(t, "the zombie's complete", err)
	if s, attempt := f.status(t, again.RunId); s != store.StatusRunning || attempt != 2 {
		t.Fatalf("the zombie changed the run: %s attempt %d", s, attempt)
	}
	if res, err := complete(wc, again.RunId, again.LeaseSecret); err != nil || res.Status != store.StatusSucceeded {
		t.Fatalf("the current lease's complete: %v %v", res, err)
	}
}

// TestPlaintextSecretAloneFences: without mTLS there is no identity to
// bind; the secret alone proves the lease.
func TestPlaintextSecretAloneFences(t *testing.T) {
	f := start(t, false)
	f.queue(t, 1)
	a, b := f.client(t, "a"), f.client(t, "b")
	r := lease(t, a, 1)[0]
	wrong := bytes.Clone(r.LeaseSecret)
	wrong[0] ^= 1
	leaseLost(t, "a wrong secret", heartbeat(b, r.RunId, wrong))
	if !strings.Contains(f.logs.String(), "caller=\"(no identity: plaintext)\"") {
		t.Fatalf("refusal log without the caller:\n%s", f.logs.String())
	}
	if err := heartbeat(b, r.RunId, r.LeaseSecret); err != nil {
		t.Fatalf("the secret from another connection: %v", err)
	}
	if res, err := complete(a, r.RunId, r.LeaseSecret); err != nil || res.Status != store.StatusSucceeded {
		t.Fatalf("complete: %v %v", res, err)
	}
}

// TestRequireIdentity: a service told to require identities refuses a
// peer without a verified certificate, before anything else.
func TestRequireIdentity(t *testing.T) {
	st := &struct{ workerapi.Store }{} // never reached
	svc, err := workerapi.New(workerapi.Config{Store: st, RequireIdentity: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := svc.Lease(ctx, &schedulerv1.LeaseRequest{WorkerId: "w", MaxRuns: 1}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Lease without identity: %v", err)
	}
	if _, err := svc.Heartbeat(ctx, &schedulerv1.HeartbeatRequest{RunId: 1, LeaseSecret: make([]byte, 16)}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Heartbeat without identity: %v", err)
	}
	if _, err := svc.Complete(ctx, &schedulerv1.CompleteRequest{RunId: 1, LeaseSecret: make([]byte, 16),
		Outcome: schedulerv1.Outcome_OUTCOME_SUCCEEDED}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Complete without identity: %v", err)
	}
}
