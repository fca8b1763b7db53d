// Package target is the executor seam of the scheduler: a worker hands
// each leased attempt to the Target registered for the job's target.type
// and records the Result. The core (runner, worker, store) knows nothing
// of HTTP, queues or containers; adding a kind means implementing Target
// (and Validator for its configuration) and registering it.
package target

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/portico-io/portico/scheduler/jobspec"
)

// Outcome classifies one delivery attempt.
type Outcome int

const (
	// Succeeded: the executor accepted the run.
	Succeeded Outcome = iota
	// Retryable: a transient failure; the attempt counts and the run is
	// retried with backoff until maxAttempts.
	Retryable
	// Fatal: retrying cannot help (e.g. HTTP 4xx); the run goes DEAD.
	Fatal
	// Deferred: the executor refused to try (e.g. its circuit breaker is
	// open); the attempt does not count and the run waits RetryAfter.
	Deferred
)

func (o Outcome) String() string {
	switch o {
	case Succeeded:
		return "succeeded"
	case Retryable:
		return "retryable"
	case Fatal:
		return "fatal"
	case Deferred:
		return "deferred"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Delivery is one attempt of a run. Everything in it derives from the
// run's slot, never from the current time.
type Delivery struct {
	RunID       int64
	JobID       int64
	ScheduledAt time.Time
	Attempt     int
	// Spec is the job's normalized spec; read-only.
	Spec *jobspec.Spec
}

// IdempotencyKey is the key every delivery of the run must carry.
func (d Delivery) IdempotencyKey() string { return jobspec.IdempotencyKey(d.JobID, d.ScheduledAt) }

// Payload is the templated payload of the run.
func (d Delivery) Payload() []byte {
	return d.Spec.Render(jobspec.RunValues{JobID: d.JobID, ScheduledAt: d.ScheduledAt})
}

// Result is what an attempt came to.
type Result struct {
	Outcome Outcome
	// Message explains a failure (stored as the run's last_error).
	Message string
	// RetryAfter is how long a Deferred run waits.
	RetryAfter time.Duration
}

// Target executes deliveries of one kind. Deliver must honour ctx (the
// per-attempt timeout, a lost lease, a cancelled run) and be safe for
// concurrent use.
type Target interface {
	Deliver(ctx context.Context, d Delivery) Result
}

// Validator is implemented by targets whose configuration the API must
// check at create/PATCH (all kinds but HTTP, which jobspec validates).
type Validator interface {
	Validate(t *jobspec.Target) error
}

// Registry maps target.type to its executor. It is built once at start-up
// and read-only afterwards.
type Registry map[string]Target

// Deliver dispatches d to the target of its kind; an unknown kind is
// Fatal (the job was created by a scheduler with more executors).
func (r Registry) Deliver(ctx context.Context, d Delivery) Result {
	t, ok := r[d.Spec.Target.Type]
	if !ok {
		return Result{Outcome: Fatal, Message: fmt.Sprintf("no executor for target type %q (have %v)", d.Spec.Target.Type, r.kinds())}
	}
	return t.Deliver(ctx, d)
}

// Kinds returns the validators of the non-HTTP kinds, for
// jobspec.Spec.NormalizeKinds.
func (r Registry) Kinds() map[string]jobspec.KindValidator {
	out := map[string]jobspec.KindValidator{}
	for kind, t := range r {
		if kind == jobspec.TargetHTTP {
			continue
		}
		if v, ok := t.(Validator); ok {
			out[kind] = v.Validate
		} else {
			out[kind] = func(*jobspec.Target) error { return nil }
		}
	}
	return out
}

func (r Registry) kinds() []string {
	var out []string
	for k := range r {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
