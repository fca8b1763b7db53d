// Package workerapi serves the scheduler's gRPC worker API
// (portico.scheduler.v1.WorkerService, :18301): remote workers Lease ready
// runs, Heartbeat them and Complete them. Each leased run comes with a
// 128-bit random lease secret (the store keeps only its SHA-256) bound to
// the caller's verified identity (its mTLS certificate's SPIFFE ID; none
// with --insecure-plaintext, where the secret alone proves the lease).
// Every call after Lease must present the secret from that identity.
//
// A call that does not prove the run's current lease — a guessed or stale
// secret, another worker's identity, a run that does not exist — is
// FAILED_PRECONDITION with ErrorInfo reason LEASE_LOST, the answer a worker
// whose lease was reaped gets, so no worker learns whether another's run
// exists; it is logged at warn (run id and caller, never the secret) and
// counted in portico_scheduler_worker_calls_refused_total. The lease's
// holder learns RUN_CANCELLED when its run was cancelled. A refused call
// changes nothing. Outcomes go through the same retry policy as in-process
// workers (worker.Record), fenced by the run's lease_token counter.
package workerapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portico-io/portico/internal/identity"
	schedulerv1 "github.com/portico-io/portico/proto/portico/scheduler/v1"
	"github.com/portico-io/portico/scheduler/metrics"
	"github.com/portico-io/portico/scheduler/store"
	"github.com/portico-io/portico/scheduler/target"
	"github.com/portico-io/portico/scheduler/worker"
)

// Limits of the API.
const (
	DefaultLease   = 30 * time.Second
	MinLease       = time.Second
	MaxLease       = 10 * time.Minute
	MaxRuns        = 100
	MaxRetryAfter  = time.Hour
	MaxMessage     = 4096
	MaxWorkerIDLen = 128
	// Reasons in the ErrorInfo of FAILED_PRECONDITION.
	ReasonLeaseLost    = "LEASE_LOST"
	ReasonRunCancelled = "RUN_CANCELLED"
	errorDomain        = "scheduler.portico.io"
)

// Store is what the worker API needs from the store: leases by secret and
// holder, and the counter-fenced outcome writes.
type Store interface {
	ClaimRemote(ctx context.Context, workerID, holder string, n int, ttl time.Duration, maxRank int) ([]store.Lease, error)
	HeartbeatRemote(ctx context.Context, runID int64, secret []byte, holder string, ttl time.Duration) error
	LeasedRemote(ctx context.Context, runID int64, secret []byte, holder string) (store.Lease, error)
	worker.Recorder
}

var _ Store = (*store.Store)(nil)

// Config configures the service.
type Config struct {
	Store   Store // required
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	// RequireIdentity refuses (UNAUTHENTICATED) any call whose peer has no
	// verified identity. Set it whenever the server speaks mTLS; off
	// (plaintext), leases have no holder and the secret alone proves one.
	RequireIdentity bool
}

// Service implements schedulerv1.WorkerServiceServer; safe for concurrent use.
type Service struct {
	schedulerv1.UnimplementedWorkerServiceServer
	cfg Config
}

var _ schedulerv1.WorkerServiceServer = (*Service)(nil)

// New validates cfg.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("workerapi: Store is required")
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New(nil)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg}, nil
}

func invalid(field, msg string) error {
	st := status.New(codes.InvalidArgument, field+": "+msg)
	if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: msg}}}); err == nil {
		return d.Err()
	}
	return st.Err()
}

func leaseDuration(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return DefaultLease, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, invalid(field, err.Error())
	}
	v := d.AsDuration()
	if v < MinLease || v > MaxLease {
		return 0, invalid(field, "must be 1s..10m")
	}
	return v, nil
}

// toStatus translates store errors at the edge.
func toStatus(err error) error {
	reason := ""
	switch {
	case errors.Is(err, store.ErrCancelled):
		reason = ReasonRunCancelled
	case errors.Is(err, store.ErrLeaseLost):
		reason = ReasonLeaseLost
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request canceled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded")
	default:
		return status.Error(codes.Internal, "internal error")
	}
	st := status.New(codes.FailedPrecondition, "lease token is not current: "+reason)
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: errorDomain}); derr == nil {
		return d.Err()
	}
	return st.Err()
}

// caller returns the verified identity of the call's peer, "" when it has
// none and none is required.
func (s *Service) caller(ctx context.Context) (string, error) {
	id, err := identity.FromContext(ctx)
	if err == nil {
		return id.String(), nil
	}
	if s.cfg.RequireIdentity {
		return "", status.Error(codes.Unauthenticated, "a verified worker certificate is required")
	}
	return "", nil
}

// fail translates a Heartbeat/Complete error; a call that did not prove
// the run's lease is logged and counted first (never with the secret).
func (s *Service) fail(rpc string, runID int64, caller string, err error) error {
	if nh, ok := errors.AsType[*store.NotHolderError](err); ok {
		if caller == "" {
			caller = "(no identity: plaintext)"
		}
		s.cfg.Metrics.WorkerRefused.WithLabelValues(rpc, nh.Reason).Inc()
		s.cfg.Logger.Warn("workerapi: refused a call that does not prove the run's lease",
			"rpc", rpc, "run_id", runID, "caller", caller, "reason", nh.Reason)
	}
	return toStatus(err)
}

// Lease implements WorkerService.Lease.
func (s *Service) Lease(ctx context.Context, req *schedulerv1.LeaseRequest) (*schedulerv1.LeaseResponse, error) {
	holder, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	if req.GetWorkerId() == "" || len(req.GetWorkerId()) > MaxWorkerIDLen {
		return nil, invalid("worker_id", "required, at most 128 bytes")
	}
	if req.GetMaxRuns() < 1 || req.GetMaxRuns() > MaxRuns {
		return nil, invalid("max_runs", "must be 1..100")
	}
	ttl, err := leaseDuration("lease", req.GetLease())
	if err != nil {
		return nil, err
	}
	maxRank := 2
	switch req.GetMinPriority() {
	case schedulerv1.Priority_PRIORITY_UNSPECIFIED, schedulerv1.Priority_PRIORITY_LOW:
	case schedulerv1.Priority_PRIORITY_NORMAL:
		maxRank = 1
	case schedulerv1.Priority_PRIORITY_HIGH:
		maxRank = 0
	default:
		return nil, invalid("min_priority", "unknown priority")
	}
	leases, err := s.cfg.Store.ClaimRemote(ctx, req.GetWorkerId(), holder, int(req.GetMaxRuns()), ttl, maxRank)
	if err != nil {
		s.cfg.Logger.Error("workerapi: claim failed", "err", err)
		return nil, toStatus(err)
	}
	s.cfg.Metrics.Transitions.WithLabelValues(store.StatusRunning).Add(float64(len(leases)))
	out := &schedulerv1.LeaseResponse{}
	for _, l := range leases {
		d := target.Delivery{RunID: l.RunID, JobID: l.ScheduleID, ScheduledAt: l.ScheduledAt, Attempt: l.Attempt, Spec: l.Spec}
		tj, err := json.Marshal(l.Spec.Target)
		if err != nil {
			return nil, status.Error(codes.Internal, "internal error")
		}
		out.Runs = append(out.Runs, &schedulerv1.LeasedRun{
			RunId: l.RunID, JobId: l.ScheduleID, Tenant: l.Spec.Tenant, ScheduledAt: timestamppb.New(l.ScheduledAt),
			Attempt: int32(l.Attempt), LeaseSecret: l.Secret, IdempotencyKey: d.IdempotencyKey(),
			TargetType: l.Spec.Target.Type, TargetJson: tj, Payload: d.Payload(),
			AttemptTimeout: durationpb.New(time.Duration(l.Spec.Execution.TimeoutSeconds) * time.Second),
		})
	}
	return out, nil
}

func checkRun(runID int64, secret []byte) error {
	if runID <= 0 {
		return invalid("run_id", "required")
	}
	if len(secret) != store.LeaseSecretLen {
		return invalid("lease_secret", "required: the 16 bytes of LeasedRun.lease_secret")
	}
	return nil
}

// Heartbeat implements WorkerService.Heartbeat.
func (s *Service) Heartbeat(ctx context.Context, req *schedulerv1.HeartbeatRequest) (*schedulerv1.HeartbeatResponse, error) {
	holder, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkRun(req.GetRunId(), req.GetLeaseSecret()); err != nil {
		return nil, err
	}
	ttl, err := leaseDuration("lease", req.GetLease())
	if err != nil {
		return nil, err
	}
	if err := s.cfg.Store.HeartbeatRemote(ctx, req.GetRunId(), req.GetLeaseSecret(), holder, ttl); err != nil {
		return nil, s.fail("heartbeat", req.GetRunId(), holder, err)
	}
	return &schedulerv1.HeartbeatResponse{}, nil
}

// Complete implements WorkerService.Complete.
func (s *Service) Complete(ctx context.Context, req *schedulerv1.CompleteRequest) (*schedulerv1.CompleteResponse, error) {
	holder, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkRun(req.GetRunId(), req.GetLeaseSecret()); err != nil {
		return nil, err
	}
	if len(req.GetMessage()) > MaxMessage {
		return nil, invalid("message", "at most 4096 bytes")
	}
	res := target.Result{Message: req.GetMessage()}
	switch req.GetOutcome() {
	case schedulerv1.Outcome_OUTCOME_SUCCEEDED:
		res.Outcome = target.Succeeded
	case schedulerv1.Outcome_OUTCOME_RETRYABLE:
		res.Outcome = target.Retryable
	case schedulerv1.Outcome_OUTCOME_FATAL:
		res.Outcome = target.Fatal
	case schedulerv1.Outcome_OUTCOME_DEFERRED:
		res.Outcome = target.Deferred
		ra := req.GetRetryAfter()
		if ra == nil || ra.CheckValid() != nil || ra.AsDuration() < time.Second || ra.AsDuration() > MaxRetryAfter {
			return nil, invalid("retry_after", "required for OUTCOME_DEFERRED, 1s..1h")
		}
		res.RetryAfter = ra.AsDuration()
	default:
		return nil, invalid("outcome", "required: SUCCEEDED, RETRYABLE, FATAL or DEFERRED")
	}
	if res.Outcome != target.Succeeded && res.Message == "" {
		res.Message = "reported by worker: " + res.Outcome.String()
	}
	// The secret proves the lease; the write is then fenced by its counter
	// (l.Token), so a takeover between the two still changes nothing.
	l, err := s.cfg.Store.LeasedRemote(ctx, req.GetRunId(), req.GetLeaseSecret(), holder)
	if err != nil {
		return nil, s.fail("complete", req.GetRunId(), holder, err)
	}
	to, err := worker.Record(ctx, s.cfg.Store, l, res, rand.Float64())
	if err != nil {
		return nil, toStatus(err)
	}
	worker.Observe(s.cfg.Metrics, res, to)
	return &schedulerv1.CompleteResponse{Status: to}, nil
}
