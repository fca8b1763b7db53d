// Package metrics holds the scheduler's Prometheus collectors
// (portico_scheduler_*). Labels are bounded: run states and fixed enums.
package metrics

import "github.com/prometheus/client_golang/prometheus"

// Metrics is shared by the roles of one process; safe for concurrent use.
type Metrics struct {
	// Lag observes dispatched − scheduled (seconds) when a run is queued.
	Lag prometheus.Histogram
	// Transitions counts runs entering each state.
	Transitions *prometheus.CounterVec
	// Retries counts attempts scheduled for retry (worker and reaper).
	Retries prometheus.Counter
	// DeadLetters counts runs moved to DEAD.
	DeadLetters prometheus.Counter
	// LeaseExpirations counts RUNNING runs reaped after their lease expired.
	LeaseExpirations prometheus.Counter
	// LeasesLost counts attempts whose worker found its token stale.
	LeasesLost prometheus.Counter
	// Notifications counts webhook deliveries by result (sent, retry, failed).
	Notifications *prometheus.CounterVec
	// Replaced counts runs cancelled by concurrencyPolicy REPLACE.
	Replaced prometheus.Counter
	// Deferred counts attempts put back without using an attempt because
	// the target's circuit breaker was open.
	Deferred prometheus.Counter
	// BreakerTransitions counts per-host circuit transitions by new state.
	BreakerTransitions *prometheus.CounterVec
	// ShardChanges counts shards this process took or released.
	ShardChanges prometheus.Counter
	// ShardsOwned is how many of the 1024 shards this process holds.
	ShardsOwned prometheus.Gauge
	// FirePasses observes each fire transaction's duration by path: wheel
	// (runs handed over by the timing wheel, by id) or sweep (a scan of
	// the due index).
	FirePasses *prometheus.HistogramVec
	// WheelRuns is how many runs the timing wheel holds.
	WheelRuns prometheus.Gauge
	// WorkerYield counts the seconds the worker held claims while this
	// process's runner fired a backlog.
	WorkerYield prometheus.Counter
	// WorkerRefused counts remote Heartbeat/Complete calls refused because
	// the caller did not prove the run's lease, by rpc (heartbeat,
	// complete) and reason (token: not the run's current secret; identity:
	// the right secret from another worker identity).
	WorkerRefused *prometheus.CounterVec
}

// New registers the collectors on reg (nil: a throwaway registry).
func New(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{
		Lag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "portico_scheduler_schedule_lag_seconds",
			Help:    "Time from a run's scheduled slot to its dispatch (queued by a runner).",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300}}),
		Transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portico_scheduler_run_transitions_total",
			Help: "Runs entering each state."}, []string{"to"}),
		Retries: prometheus.NewCounter(prometheus.CounterOpts{Name: "portico_scheduler_retries_total",
			Help: "Attempts that failed and were scheduled for retry."}),
		DeadLetters: prometheus.NewCounter(prometheus.CounterOpts{Name: "portico_scheduler_dead_letters_total",
			Help: "Runs moved to DEAD (the dead-letter queue)."}),
		LeaseExpirations: prometheus.NewCounter(prometheus.CounterOpts{Name: "portico_scheduler_lease_expirations_total",
			Help: "RUNNING runs whose lease expired and were reaped."}),
		LeasesLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "portico_scheduler_leases_lost_total",
			Help: "Attempts whose completion or heartbeat was refused because the lease token moved on."}),
		Notifications: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portico_scheduler_notifications_total",
			Help: "Failure and dead-letter webhook deliveries by result (sent, retry, failed)."}, []string{"result"}),
		Replaced: prometheus.NewCounter(prometheus.CounterOpts{Name: "portico_scheduler_replaced_runs_total",
			Help: "Runs cancelled because a newer slot fired under concurrencyPolicy REPLACE."}),
		Deferred: prometheus.NewCounter(prometheus.CounterOpts{Name: "portico_scheduler_deferred_attempts_total",
			Help: "Attempts deferred without using an attempt because the target host's circuit was open."}),
		BreakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portico_scheduler_target_breaker_transitions_total",
			Help: "Per-host circuit breaker transitions of HTTP targets, by new state."}, []string{"state"}),
		ShardChanges: prometheus.NewCounter(prometheus.CounterOpts{Name: "portico_scheduler_shard_ownership_changes_total",
			Help: "Shards this process took over or released."}),
		ShardsOwned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "portico_scheduler_shards_owned",
			Help: "Logical shards (of 1024) whose due runs this process fires."}),
		FirePasses: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "portico_scheduler_fire_pass_seconds",
			Help:    "Duration of each fire transaction, by path: wheel (runs by id) or sweep (a scan of the due index).",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10}}, []string{"path"}),
		WheelRuns: prometheus.NewGauge(prometheus.GaugeOpts{Name: "portico_scheduler_wheel_runs",
			Help: "Runs the timing wheel holds (loaded or chained, not yet fired)."}),
		WorkerYield: prometheus.NewCounter(prometheus.CounterOpts{Name: "portico_scheduler_worker_yield_seconds_total",
			Help: "Seconds the worker held new claims while this process's runner fired a backlog."}),
		WorkerRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portico_scheduler_worker_calls_refused_total",
			Help: "Worker API heartbeats and completions refused for not proving the run's lease, by rpc and reason (token, identity)."},
			[]string{"rpc", "reason"}),
	}
	reg.MustRegister(m.Lag, m.Transitions, m.Retries, m.DeadLetters, m.LeaseExpirations, m.LeasesLost, m.Notifications, m.Replaced,
		m.Deferred, m.BreakerTransitions, m.ShardChanges, m.ShardsOwned, m.FirePasses, m.WheelRuns, m.WorkerYield,
		m.WorkerRefused)
	return m
}
