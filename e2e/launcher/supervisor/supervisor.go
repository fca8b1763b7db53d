// Package supervisor keeps the processes of a local run alive: it starts
// each child, waits for it to be ready, and from then on restarts it
// whenever it exits, after an exponential backoff (MinBackoff doubling up
// to MaxBackoff; a child that stayed up ResetAfter starts again from
// MinBackoff), until Stop. The other children are left alone: one crash
// never takes the run down.
//
// Every state change is logged (exits with their status, restarts with
// their delay) and handed to Config.OnChange with every child's Status, so
// what a status command shows is what the supervisor knows, not a guess
// from pids and ports.
//
// Stop stops restarting first, then signals the children (SIGTERM in
// reverse start order, SIGKILL after StopTimeout): a child that exits
// during shutdown is recorded as stopped, never restarted.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Defaults.
const (
	DefaultMinBackoff  = time.Second
	DefaultMaxBackoff  = 30 * time.Second
	DefaultResetAfter  = time.Minute
	DefaultStopTimeout = 10 * time.Second
)

// Config configures a Supervisor. Zero values take the defaults.
type Config struct {
	// MinBackoff is the delay before the first restart of a child.
	MinBackoff time.Duration
	// MaxBackoff caps the doubling delay of a child that keeps exiting.
	MaxBackoff time.Duration
	// ResetAfter: a child that stayed up this long is restarted after
	// MinBackoff again.
	ResetAfter time.Duration
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL.
	StopTimeout time.Duration
	Logger      *slog.Logger
	// OnChange, when set, is called after every state change with every
	// child's status, in the order of Start. Calls are serialized and the
	// last call carries the latest state; it must not call back into the
	// Supervisor.
	OnChange func([]Status)
}

// State is where a child is in its life.
type State string

// States.
const (
	// Starting: the process runs and is not ready yet.
	Starting State = "starting"
	// Running: the process is ready.
	Running State = "running"
	// Backoff: the process exited; it is restarted at Status.NextStart.
	Backoff State = "backoff"
	// Held: the backoff is over and Child.BeforeRestart holds the restart.
	Held State = "held"
	// Stopping: Stop signalled the process.
	Stopping State = "stopping"
	// Stopped: the process exited during Stop, or never ran again.
	Stopped State = "stopped"
	// Failed: the first process exited (or never got ready) in Start; it
	// is not restarted.
	Failed State = "failed"
)

// Child is one supervised process.
type Child struct {
	Name string
	// Ports are the ports the child listens on (shown in its Status).
	Ports []int
	// Start starts a new process of the child; restart is 0 for the first
	// one and counts the restarts after it. The process must have been
	// started (exec.Cmd.Start) and not waited for.
	Start func(restart int) (*exec.Cmd, error)
	// Ready returns nil once the process serves, or an error when it
	// gives up; ctx ends when the process exits or the supervisor stops.
	// Nil: ready once started.
	Ready func(ctx context.Context) error
	// BeforeRestart, when set, runs after the backoff and before every
	// restart, and may hold it (a cache node waits for its slots to fail
	// over). Its error is logged and the restart goes ahead; ctx ends at
	// Stop.
	BeforeRestart func(ctx context.Context, log *slog.Logger) error
}

// Status is what the supervisor knows about one child.
type Status struct {
	Name  string `json:"name"`
	State State  `json:"state"`
	// PID is the current (or last) process's.
	PID int `json:"pid,omitempty"`
	// Restarts counts the processes started after the first.
	Restarts int   `json:"restarts"`
	Ports    []int `json:"ports,omitempty"`
	// Since is when the child entered State.
	Since time.Time `json:"since"`
	// StartedAt is when the current process started.
	StartedAt time.Time `json:"startedAt,omitzero"`
	// Backoff is the delay before the pending (or the last) restart.
	Backoff time.Duration `json:"backoff,omitempty"`
	// NextStart is when a child in Backoff is restarted.
	NextStart time.Time `json:"nextStart,omitzero"`
	// LastExit is the last process exit, nil when none exited.
	LastExit *Exit `json:"lastExit,omitempty"`
}

// Exit is how a process ended.
type Exit struct {
	PID int       `json:"pid"`
	At  time.Time `json:"at"`
	// Status is the wait status as the os/exec package words it
	// ("exit status 1", "signal: killed").
	Status string `json:"status"`
	// Code is the exit code, -1 when a signal ended the process.
	Code int `json:"code"`
	// Signal names the signal that ended the process ("" when it exited).
	Signal string        `json:"signal,omitempty"`
	Uptime time.Duration `json:"uptime"`
}

// Supervisor runs children. Its methods are safe for concurrent use.
type Supervisor struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	children []*child
	stopping bool
	stopped  chan struct{} // closed by Stop, before any signal
	stopCtx  context.Context
	cancel   context.CancelFunc
	monitors sync.WaitGroup

	changeMu sync.Mutex // serializes OnChange
}

// child is a Child and its state, guarded by Supervisor.mu.
type child struct {
	Child
	st       Status
	cmd      *exec.Cmd
	exited   chan Exit // the current process's exit, sent once
	gen      int       // counts processes; a readiness result applies to its own
	failures int       // consecutive short-lived exits, for the backoff
}

// ErrStopped is returned by Start after Stop.
var ErrStopped = errors.New("supervisor: stopped")

// New returns a Supervisor with cfg's defaults filled in.
func New(cfg Config) *Supervisor {
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	cfg.MaxBackoff = max(cfg.MaxBackoff, cfg.MinBackoff)
	if cfg.ResetAfter <= 0 {
		cfg.ResetAfter = DefaultResetAfter
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Supervisor{cfg: cfg, log: log, stopped: make(chan struct{}), stopCtx: ctx, cancel: cancel}
}

// Backoff is the delay before a restart after failures consecutive
// short-lived exits (0 for the first): MinBackoff doubled failures times,
// at most MaxBackoff.
func (s *Supervisor) Backoff(failures int) time.Duration {
	d := s.cfg.MinBackoff
	for range failures {
		if d >= s.cfg.MaxBackoff/2 {
			return s.cfg.MaxBackoff
		}
		d *= 2
	}
	return min(d, s.cfg.MaxBackoff)
}

// Start starts c's first process and waits until it is ready: then c is
// supervised and Start returns nil. When the process exits first, Ready
// fails or ctx ends, Start stops the process (if it still runs), records
// the child as Failed and returns why; it is not restarted. Stop waits for
// a Start in progress.
func (s *Supervisor) Start(ctx context.Context, c Child) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return ErrStopped
	}
	ch := &child{Child: c, st: Status{Name: c.Name, Ports: slices.Clone(c.Ports)}}
	s.children = append(s.children, ch)
	err := s.spawnLocked(ch, 0)
	if err == nil {
		s.monitors.Add(1) // Start watches the process until monitor does
	}
	s.mu.Unlock()
	if err != nil {
		s.setState(ch, Failed)
		return err
	}
	s.changed()

	exited := ch.exited
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan error, 1)
	go func() { ready <- ch.ready(rctx) }()
	select {
	case err = <-ready:
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			err = fmt.Errorf("%s: not ready: %w", c.Name, err)
		}
	case e := <-exited:
		cancel()
		<-ready
		defer s.monitors.Done()
		if s.isStopping() {
			s.recordExit(ch, e, Stopped)
			return ErrStopped
		}
		s.recordExit(ch, e, Failed)
		return fmt.Errorf("%s exited before it was ready (%s)", c.Name, e.Status)
	}
	if err != nil {
		defer s.monitors.Done()
		s.mu.Lock()
		cmd := ch.cmd
		s.mu.Unlock()
		s.recordExit(ch, s.terminate(cmd, exited), Failed)
		return err
	}
	s.mu.Lock()
	if s.stopping { // Stop came while we waited, and signalled the process
		s.mu.Unlock()
		defer s.monitors.Done()
		s.recordExit(ch, <-exited, Stopped)
		return ErrStopped
	}
	s.setStateLocked(ch, Running)
	s.mu.Unlock()
	s.changed()
	go s.monitor(ch, exited) //nolint:contextcheck // the monitor outlives Start's ctx: it follows the child until Stop
	return nil
}

func (s *Supervisor) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// ready waits for the child's readiness.
func (ch *child) ready(ctx context.Context) error {
	if ch.Ready == nil {
		return nil
	}
	return ch.Ready(ctx)
}

// spawnLocked starts process number restart of ch and a goroutine that
// reports its exit on ch.exited.
func (s *Supervisor) spawnLocked(ch *child, restart int) error {
	cmd, err := ch.Start(restart)
	if err != nil {
		return fmt.Errorf("start %s: %w", ch.Name, err)
	}
	ch.cmd = cmd
	ch.gen++
	ch.exited = make(chan Exit, 1)
	ch.st.PID = cmd.Process.Pid
	ch.st.StartedAt = time.Now()
	ch.st.NextStart = time.Time{}
	s.setStateLocked(ch, Starting)
	go func(cmd *exec.Cmd, started time.Time, out chan<- Exit) {
		err := cmd.Wait()
		out <- exitOf(cmd, err, started)
	}(cmd, ch.st.StartedAt, ch.exited)
	return nil
}

// exitOf describes how cmd ended.
func exitOf(cmd *exec.Cmd, err error, started time.Time) Exit {
	now := time.Now()
	e := Exit{PID: cmd.Process.Pid, At: now, Uptime: now.Sub(started), Code: -1}
	ps := cmd.ProcessState
	if ps == nil { // Wait failed before the process ended: an I/O error
		e.Status = err.Error()
		return e
	}
	e.Status, e.Code = ps.String(), ps.ExitCode()
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		e.Signal = ws.Signal().String()
	}
	return e
}

// monitor restarts ch whenever its process exits, until Stop.
func (s *Supervisor) monitor(ch *child, exited <-chan Exit) {
	defer s.monitors.Done()
	var readyCancel context.CancelFunc // the current process's readiness poll
	defer func() {
		if readyCancel != nil {
			readyCancel()
		}
	}()
	for {
		e := <-exited
		if readyCancel != nil {
			readyCancel()
		}
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			s.recordExit(ch, e, Stopped)
			return
		}
		if e.Uptime >= s.cfg.ResetAfter {
			ch.failures = 0
		}
		delay := s.Backoff(ch.failures)
		ch.failures++
		ch.st.LastExit = &e
		ch.st.Backoff = delay
		ch.st.NextStart = e.At.Add(delay)
		s.setStateLocked(ch, Backoff)
		restarts := ch.st.Restarts
		s.mu.Unlock()
		s.changed()
		s.log.Warn("component exited; restarting it", "component", ch.Name, "pid", e.PID, "status", e.Status,
			"code", e.Code, "signal", e.Signal, "uptime", e.Uptime.Round(time.Millisecond), "restarts", restarts,
			"restart_in", delay)

		if !s.pause(delay) {
			s.finish(ch)
			return
		}
		if ch.BeforeRestart != nil {
			s.setState(ch, Held)
			if err := ch.BeforeRestart(s.stopCtx, s.log.With("component", ch.Name)); err != nil && s.stopCtx.Err() == nil {
				s.log.Warn("restarting anyway", "component", ch.Name, "err", err)
			}
		}

		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			s.finish(ch)
			return
		}
		err := s.spawnLocked(ch, restarts+1)
		if err == nil {
			ch.st.Restarts++
			exited = ch.exited
		}
		gen, pid := ch.gen, ch.st.PID
		s.mu.Unlock()
		if err != nil {
			// Counted as an exit of a process that never ran: back off
			// further and try again.
			s.log.Error("component restart failed", "component", ch.Name, "err", err)
			failed := make(chan Exit, 1)
			failed <- Exit{At: time.Now(), Status: err.Error(), Code: -1}
			exited = failed
			continue
		}
		s.changed()
		s.log.Info("component restarted", "component", ch.Name, "pid", pid, "restarts", restarts+1)
		var rctx context.Context
		rctx, readyCancel = context.WithCancel(s.stopCtx)
		go s.awaitReady(rctx, ch, gen)
	}
}

// awaitReady marks process gen of ch Running once it is ready; ctx ends
// when that process exits or at Stop.
func (s *Supervisor) awaitReady(ctx context.Context, ch *child, gen int) {
	err := ch.ready(ctx)
	s.mu.Lock()
	current := ch.gen == gen && ch.st.State == Starting
	if current && err == nil {
		s.setStateLocked(ch, Running)
	}
	pid := ch.st.PID
	s.mu.Unlock()
	switch {
	case !current:
	case err != nil:
		s.log.Warn("restarted component is not ready", "component", ch.Name, "pid", pid, "err", err)
	default:
		s.changed()
		s.log.Info("component ready", "component", ch.Name, "pid", pid)
	}
}

// pause waits d, or returns false at Stop.
func (s *Supervisor) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.stopped:
		return false
	}
}

// finish records a child that Stop caught between two processes.
func (s *Supervisor) finish(ch *child) {
	s.mu.Lock()
	ch.st.NextStart = time.Time{}
	s.setStateLocked(ch, Stopped)
	s.mu.Unlock()
	s.changed()
}

// recordExit records e as ch's last exit and puts ch in state.
func (s *Supervisor) recordExit(ch *child, e Exit, state State) {
	s.mu.Lock()
	ch.st.LastExit = &e
	s.setStateLocked(ch, state)
	s.mu.Unlock()
	s.changed()
	if state == Failed {
		s.log.Error("component exited", "component", ch.Name, "pid", e.PID, "status", e.Status, "code", e.Code, "signal", e.Signal,
			"uptime", e.Uptime.Round(time.Millisecond))
	}
}

// terminate stops a process that has not exited: SIGTERM, then SIGKILL
// after StopTimeout. It returns the exit.
func (s *Supervisor) terminate(cmd *exec.Cmd, exited <-chan Exit) Exit {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(s.cfg.StopTimeout)
	defer t.Stop()
	select {
	case e := <-exited:
		return e
	case <-t.C:
		_ = cmd.Process.Kill()
		return <-exited
	}
}

func (s *Supervisor) setState(ch *child, st State) {
	s.mu.Lock()
	s.setStateLocked(ch, st)
	s.mu.Unlock()
	s.changed()
}

func (s *Supervisor) setStateLocked(ch *child, st State) {
	if ch.st.State != st {
		ch.st.State, ch.st.Since = st, time.Now()
	}
}

// Status returns every child's status, in the order of Start.
func (s *Supervisor) Status() []Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Status, len(s.children))
	for i, ch := range s.children {
		out[i] = ch.st
		out[i].Ports = slices.Clone(ch.st.Ports)
		if ch.st.LastExit != nil {
			e := *ch.st.LastExit
			out[i].LastExit = &e
		}
	}
	return out
}

// changed hands the current status to OnChange. The status is read under
// changeMu, so the last call always carries the latest state.
func (s *Supervisor) changed() {
	if s.cfg.OnChange == nil {
		return
	}
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	s.cfg.OnChange(s.Status())
}

// Stop ends supervision: no child is restarted from now on, every running
// process gets SIGTERM (in reverse start order) and SIGKILL when it has not
// exited after StopTimeout. It returns once every supervised process has
// exited. Calling it again waits the same way.
func (s *Supervisor) Stop() {
	s.mu.Lock()
	first := !s.stopping
	s.stopping = true
	var live []*exec.Cmd
	if first {
		close(s.stopped)
		s.cancel()
		for i := len(s.children) - 1; i >= 0; i-- {
			ch := s.children[i]
			if ch.st.State == Starting || ch.st.State == Running {
				live = append(live, ch.cmd)
				s.setStateLocked(ch, Stopping)
			}
		}
	}
	s.mu.Unlock()
	if first {
		s.changed()
	}
	for _, cmd := range live {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	done := make(chan struct{})
	go func() { s.monitors.Wait(); close(done) }()
	t := time.NewTimer(s.cfg.StopTimeout)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	for _, cmd := range live {
		_ = cmd.Process.Kill()
	}
	if len(live) > 0 {
		s.log.Warn("killed components that did not stop in time", "timeout", s.cfg.StopTimeout)
	}
	<-done
}
