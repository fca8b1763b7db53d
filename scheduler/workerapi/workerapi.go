// Package workerapi serves the scheduler's gRPC worker API
// (portico.scheduler.v1.WorkerService, :18301): remote workers Lease ready
// runs, Heartbeat them and Complete them, every call after Lease fenced by
// the run's lease token. A stale token (the run was reaped and maybe
// re-leased) or a cancelled run is FAILED_PRECONDITION with an ErrorInfo
// reason LEASE_LOST or RUN_CANCELLED, and changes nothing. Outcomes go
// through the same retry policy as in-process workers (worker.Record).
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

// Store is what the worker API needs from the store.
type Store interface {
	Claim(ctx context.Context, workerID string, n int, ttl time.Duration, maxRank int) ([]store.Lease, error)
	Heartbeat(ctx context.Context, runID, token int64, ttl time.Duration) error
	Leased(ctx context.Context, runID, token int64) (store.Lease, error)
	worker.Recorder
}

var _ Store = (*store.Store)(nil)

// Config configures the service.
type Config struct {
	Store   Store // required
	Metrics *metrics.Metrics
	Logger  *slog.Logger
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

// Lease implements WorkerService.Lease.
func (s *Service) Lease(ctx context.Context, req *schedulerv1.LeaseRequest) (*schedulerv1.LeaseResponse, error) {
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
	leases, err := s.cfg.Store.Claim(ctx, req.GetWorkerId(), int(req.GetMaxRuns()), ttl, maxRank)
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
			Attempt: int32(l.Attempt), LeaseToken: l.Token, IdempotencyKey: d.IdempotencyKey(),
			TargetType: l.Spec.Target.Type, TargetJson: tj, Payload: d.Payload(),
			AttemptTimeout: durationpb.New(time.Duration(l.Spec.Execution.TimeoutSeconds) * time.Second),
		})
	}
	return out, nil
}

func checkRun(runID, token int64) error {
	if runID <= 0 {
		return invalid("run_id", "required")
	}
	if token <= 0 {
		return invalid("lease_token", "required")
	}
	return nil
}

// Heartbeat implements WorkerService.Heartbeat.
func (s *Service) Heartbeat(ctx context.Context, req *schedulerv1.HeartbeatRequest) (*schedulerv1.HeartbeatResponse, error) {
	if err := checkRun(req.GetRunId(), req.GetLeaseToken()); err != nil {
		return nil, err
	}
	ttl, err := leaseDuration("lease", req.GetLease())
	if err != nil {
		return nil, err
	}
	if err := s.cfg.Store.Heartbeat(ctx, req.GetRunId(), req.GetLeaseToken(), ttl); err != nil {
		return nil, toStatus(err)
	}
	return &schedulerv1.HeartbeatResponse{}, nil
}

// Complete implements WorkerService.Complete.
func (s *Service) Complete(ctx context.Context, req *schedulerv1.CompleteRequest) (*schedulerv1.CompleteResponse, error) {
	if err := checkRun(req.GetRunId(), req.GetLeaseToken()); err != nil {
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
	l, err := s.cfg.Store.Leased(ctx, req.GetRunId(), req.GetLeaseToken())
	if err != nil {
		return nil, toStatus(err)
	}
	to, err := worker.Record(ctx, s.cfg.Store, l, res, rand.Float64())
	if err != nil {
		return nil, toStatus(err)
	}
	worker.Observe(s.cfg.Metrics, res, to)
	return &schedulerv1.CompleteResponse{Status: to}, nil
}
