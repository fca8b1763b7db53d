package scheduler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portico-io/portico/internal/eventually"
	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/testdeps"
	"github.com/portico-io/portico/internal/tlstest"
	schedulerv1 "github.com/portico-io/portico/proto/portico/scheduler/v1"
	"github.com/portico-io/portico/scheduler"
	"github.com/portico-io/portico/scheduler/store"
	"github.com/portico-io/portico/scheduler/workerapi"
)

// grpcReason returns the code and ErrorInfo reason / BadRequest field of err.
func grpcReason(err error) (codes.Code, string) {
	st := status.Convert(err)
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			return st.Code(), d.Reason
		case *errdetails.BadRequest:
			if len(d.FieldViolations) > 0 {
				return st.Code(), d.FieldViolations[0].Field
			}
		}
	}
	return st.Code(), ""
}

// TestGRPCRemoteWorker runs a scheduler without local workers and works
// its runs over the gRPC worker API: lease, heartbeat, complete, retry
// policy applied server-side, stale lease secrets rejected after a reap, a
// cancelled run reported on heartbeat, invalid requests refused.
func TestGRPCRemoteWorker(t *testing.T) {
	url := testdeps.Postgres(t)
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	glis, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ca := tlstest.New(t)
	tokenFile, token := adminToken(t)
	go func() {
		done <- scheduler.Run(ctx, scheduler.Config{DatabaseURL: url, Listener: lis, WorkerGRPCListener: glis, AdminTokenFile: tokenFile,
			Roles: scheduler.Roles{API: true, Runner: true, Reaper: true}, TargetAllowlist: "127.0.0.0/8",
			Tick: 50 * time.Millisecond, ReapInterval: 50 * time.Millisecond, TLS: ca.Files(t, identity.Scheduler, "scheduler")})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	worker := ca.Load(t, identity.Worker, "remote-1")
	conn, err := grpc.NewClient(glis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(
		worker.ClientConfig(identity.Policy{Roles: []identity.Role{identity.Scheduler}}))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	wc := schedulerv1.NewWorkerServiceClient(conn)
	// The REST API is TLS too; this client trusts the CA, no certificate.
	e := &env{api: &httptest.Server{URL: "https://" + lis.Addr().String()},
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: ca.ClientTLS(nil)}}}
	if resp, err := http.Get("http://" + lis.Addr().String() + "/v1/jobs"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("plaintext request to the TLS REST API: %d", resp.StatusCode)
		}
	}
	eventually.True(t, 10*time.Second, "API up", func() bool {
		resp, err := e.client.Get(e.api.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	e.token = token()
	id := e.createJob(t, oneOff("http://127.0.0.1:9/hook", `{"maxAttempts":3,"initialBackoffMs":1,"maxBackoffMs":1}`))
	second := time.Second
	lease := func(what string) *schedulerv1.LeasedRun {
		t.Helper()
		var got *schedulerv1.LeasedRun
		eventually.True(t, 10*time.Second, what, func() bool {
			resp, err := wc.Lease(ctx, &schedulerv1.LeaseRequest{WorkerId: "remote-1", MaxRuns: 10, Lease: durationpb.New(second)})
			if err != nil {
				t.Fatalf("Lease: %v", err)
			}
			if len(resp.Runs) > 0 {
				got = resp.Runs[0]
			}
			return got != nil
		})
		return got
	}
	r1 := lease("the first lease")
	var tgt struct {
		HTTP struct{ URL string } `json:"http"`
	}
	var payload map[string]string
	if strconv.FormatInt(r1.JobId, 10) != id || r1.Attempt != 1 || r1.IdempotencyKey != id+":2020-01-01T00:00:00Z" ||
		r1.TargetType != "HTTP" || json.Unmarshal(r1.TargetJson, &tgt) != nil || tgt.HTTP.URL != "http://127.0.0.1:9/hook" ||
		json.Unmarshal(r1.Payload, &payload) != nil || payload["job"] != id || payload["at"] != "2020-01-01T00:00:00Z" ||
		r1.AttemptTimeout.AsDuration() != 5*time.Second || r1.Tenant != "acme" {
		t.Fatalf("leased run %v (target %s, payload %s)", r1, r1.TargetJson, r1.Payload)
	}
	if _, err := wc.Heartbeat(ctx, &schedulerv1.HeartbeatRequest{RunId: r1.RunId, LeaseSecret: r1.LeaseSecret}); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	res, err := wc.Complete(ctx, &schedulerv1.CompleteRequest{RunId: r1.RunId, LeaseSecret: r1.LeaseSecret,
		Outcome: schedulerv1.Outcome_OUTCOME_RETRYABLE, Message: "remote says 503"})
	if err != nil || res.Status != store.StatusRetryWait {
		t.Fatalf("Complete RETRYABLE: %v %v", res, err)
	}
	_, err = wc.Complete(ctx, &schedulerv1.CompleteRequest{RunId: r1.RunId, LeaseSecret: r1.LeaseSecret, Outcome: schedulerv1.Outcome_OUTCOME_SUCCEEDED})
	if c, reason := grpcReason(err); c != codes.FailedPrecondition || reason != workerapi.ReasonLeaseLost {
		t.Fatalf("second Complete with the same token: %v", err)
	}

	// Attempt 2 is leased and abandoned: the reaper takes it back; the
	// zombie's completion is refused and attempt 3 completes.
	zombie := lease("attempt 2")
	if zombie.Attempt != 2 || bytes.Equal(zombie.LeaseSecret, r1.LeaseSecret) || zombie.IdempotencyKey != r1.IdempotencyKey {
		t.Fatalf("attempt 2 lease %v", zombie)
	}
	r3 := lease("attempt 3 after the reaper")
	if r3.Attempt != 3 || bytes.Equal(r3.LeaseSecret, zombie.LeaseSecret) {
		t.Fatalf("attempt 3 lease %v after the zombie's", r3)
	}
	_, err = wc.Complete(ctx, &schedulerv1.CompleteRequest{RunId: zombie.RunId, LeaseSecret: zombie.LeaseSecret, Outcome: schedulerv1.Outcome_OUTCOME_SUCCEEDED})
	if c, reason := grpcReason(err); c != codes.FailedPrecondition || reason != workerapi.ReasonLeaseLost {
		t.Fatalf("zombie Complete: %v", err)
	}
	if res, err := wc.Complete(ctx, &schedulerv1.CompleteRequest{RunId: r3.RunId, LeaseSecret: r3.LeaseSecret,
		Outcome: schedulerv1.Outcome_OUTCOME_SUCCEEDED}); err != nil || res.Status != store.StatusSucceeded {
		t.Fatalf("Complete attempt 3: %v %v", res, err)
	}
	if r := e.runs(t, id)[0]; r["status"] != store.StatusSucceeded || r["attempt"].(float64) != 3 || r["workerId"] != "remote-1" {
		t.Fatalf("run %v", r)
	}

	// A remotely leased run cancelled through the API: the next heartbeat says so.
	id2 := e.createJob(t, oneOff("http://127.0.0.1:9/hook", `{"maxAttempts":1}`))
	r4 := lease("the second job")
	if strconv.FormatInt(r4.JobId, 10) != id2 {
		t.Fatalf("leased %v, want job %s", r4, id2)
	}
	if code, out := e.do(t, "POST", "/v1/runs/"+strconv.FormatInt(r4.RunId, 10)+":cancel", "", nil); code != 200 {
		t.Fatalf("cancel: %d %v", code, out)
	}
	_, err = wc.Heartbeat(ctx, &schedulerv1.HeartbeatRequest{RunId: r4.RunId, LeaseSecret: r4.LeaseSecret})
	if c, reason := grpcReason(err); c != codes.FailedPrecondition || reason != workerapi.ReasonRunCancelled {
		t.Fatalf("heartbeat of a cancelled run: %v", err)
	}

	for _, c := range []struct {
		call  func() error
		field string
	}{
		{func() error {
			_, err := wc.Lease(ctx, &schedulerv1.LeaseRequest{WorkerId: "w", MaxRuns: 0})
			return err
		}, "max_runs"},
		{func() error { _, err := wc.Lease(ctx, &schedulerv1.LeaseRequest{MaxRuns: 1}); return err }, "worker_id"},
		{func() error {
			_, err := wc.Lease(ctx, &schedulerv1.LeaseRequest{WorkerId: "w", MaxRuns: 1, Lease: durationpb.New(time.Millisecond)})
			return err
		}, "lease"},
		{func() error {
			_, err := wc.Complete(ctx, &schedulerv1.CompleteRequest{RunId: r4.RunId, LeaseSecret: r4.LeaseSecret})
			return err
		}, "outcome"},
		{func() error {
			_, err := wc.Complete(ctx, &schedulerv1.CompleteRequest{RunId: r4.RunId, LeaseSecret: r4.LeaseSecret, Outcome: schedulerv1.Outcome_OUTCOME_DEFERRED})
			return err
		}, "retry_after"},
		{func() error { _, err := wc.Heartbeat(ctx, &schedulerv1.HeartbeatRequest{RunId: r4.RunId}); return err }, "lease_secret"},
	} {
		if code, field := grpcReason(c.call()); code != codes.InvalidArgument || field != c.field {
			t.Errorf("want InvalidArgument on %s, got %v %q", c.field, code, field)
		}
	}
	if r := e.runs(t, id2)[0]; r["status"] != store.StatusCancelled {
		t.Fatalf("invalid calls changed the run: %v", r)
	}

	// A remote worker deferring (its own breaker open) gets the same
	// deadline: past execution.maxDeferSeconds the run is DEAD, CIRCUIT_OPEN.
	id3 := e.createJob(t, strings.Replace(oneOff("http://127.0.0.1:9/hook", `{"maxAttempts":3}`),
		`"execution":{`, `"execution":{"maxDeferSeconds":1,`, 1))
	for i, want := range []string{store.StatusRetryWait, store.StatusDead} {
		r := lease("a deferred run of the third job")
		if strconv.FormatInt(r.JobId, 10) != id3 || r.Attempt != 1 {
			t.Fatalf("leased %v, want job %s attempt 1", r, id3)
		}
		res, err := wc.Complete(ctx, &schedulerv1.CompleteRequest{RunId: r.RunId, LeaseSecret: r.LeaseSecret,
			Outcome: schedulerv1.Outcome_OUTCOME_DEFERRED, RetryAfter: durationpb.New(time.Hour), Message: "remote breaker open"})
		if err != nil || res.Status != want {
			t.Fatalf("deferral %d: %v %v, want %s", i, res, err, want)
		}
	}
	if r := e.runs(t, id3)[0]; !strings.HasPrefix(r["lastError"].(string), "CIRCUIT_OPEN: ") {
		t.Fatalf("run %v", r)
	}
}

// The worker API hands out leased runs and their payloads: only worker
// identities get in, and a scheduler refuses to serve it in plaintext
// unless told.
func TestWorkerAPIRequiresWorkerIdentity(t *testing.T) {
	url := testdeps.Postgres(t)
	ca := tlstest.New(t)
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	glis, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- scheduler.Run(ctx, scheduler.Config{DatabaseURL: url, Listener: lis, WorkerGRPCListener: glis,
			Roles: scheduler.Roles{API: true}, TLS: ca.Files(t, identity.Scheduler, "scheduler")})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	for _, tc := range ca.Cases(t, identity.Worker, identity.Gateway) {
		t.Run(tc.Name, func(t *testing.T) {
			conn, err := grpc.NewClient(glis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(tc.Client)))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			defer ccancel()
			_, err = schedulerv1.NewWorkerServiceClient(conn).Lease(cctx, &schedulerv1.LeaseRequest{WorkerId: "w", MaxRuns: 1,
				Lease: durationpb.New(time.Second)}, grpc.WaitForReady(tc.Allowed))
			if tc.Allowed != (err == nil) {
				t.Fatalf("allowed=%v, Lease: %v", tc.Allowed, err)
			}
		})
	}

	plain, _ := net.Listen("tcp", "127.0.0.1:0")
	err := scheduler.Run(ctx, scheduler.Config{DatabaseURL: url, Listener: plain, WorkerGRPCAddr: "127.0.0.1:0", Roles: scheduler.Roles{API: true}})
	if err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("a worker API without TLS or InsecurePlaintext: %v", err)
	}
	err = scheduler.Run(ctx, scheduler.Config{DatabaseURL: url, Listener: plain, Roles: scheduler.Roles{API: true}})
	if err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("a REST API without TLS or InsecurePlaintext: %v", err)
	}
}
