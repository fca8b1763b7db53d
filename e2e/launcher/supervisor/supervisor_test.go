package supervisor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/xdstest"
)

func TestBackoffDoublesToTheCap(t *testing.T) {
	s := New(Config{})
	var got []time.Duration
	for i := range 8 {
		got = append(got, s.Backoff(i))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
		30 * time.Second, 30 * time.Second, 30 * time.Second}
	if !slices.Equal(got, want) {
		t.Fatalf("backoffs %v, want %v", got, want)
	}
	if d := New(Config{MinBackoff: 3 * time.Second, MaxBackoff: 5 * time.Second}).Backoff(1); d != 5*time.Second {
		t.Fatalf("capped backoff %v", d)
	}
}

// sh starts a shell script as a child process.
func sh(script string) (*exec.Cmd, error) {
	c := exec.Command("sh", "-c", script)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return c, c.Start()
}

// recorder keeps the statuses OnChange reports.
type recorder struct {
	mu   sync.Mutex
	last []Status
	// backoffs are the delays of the restarts of each child, in order.
	backoffs map[string][]time.Duration
	seen     map[string]int // exits recorded, by child
}

func (r *recorder) onChange(st []Status) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = st
	if r.backoffs == nil {
		r.backoffs, r.seen = map[string][]time.Duration{}, map[string]int{}
	}
	for _, s := range st {
		// One Backoff state per exit: restarts+1 exits so far.
		if s.State == Backoff && r.seen[s.Name] == s.Restarts {
			r.backoffs[s.Name] = append(r.backoffs[s.Name], s.Backoff)
			r.seen[s.Name]++
		}
	}
}

func (r *recorder) status(name string) Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.last {
		if s.Name == name {
			return s
		}
	}
	return Status{}
}

// A child that exits is restarted after a backoff that doubles up to the
// cap while it keeps exiting young, and starts from the minimum again once
// a process has stayed up ResetAfter. Each exit is recorded with its
// status.
func TestRestartsWithBackoff(t *testing.T) {
	rec := &recorder{}
	s := New(Config{MinBackoff: 10 * time.Millisecond, MaxBackoff: 30 * time.Millisecond, ResetAfter: time.Second,
		StopTimeout: time.Second, OnChange: rec.onChange})
	defer s.Stop()
	scripts := []string{
		"exec sleep 60",     // killed by the test
		"exit 3",            // exits young twice
		"exit 3",            //
		"sleep 1.2; exit 4", // stays up past ResetAfter
		"exec sleep 60",     // stays
	}
	var starts atomic.Int32
	err := s.Start(context.Background(), Child{Name: "c", Ports: []int{1234},
		Start: func(restart int) (*exec.Cmd, error) {
			starts.Add(1)
			return sh(scripts[min(restart, len(scripts)-1)])
		}})
	if err != nil {
		t.Fatal(err)
	}
	first := s.Status()[0]
	if first.State != Running || first.PID == 0 || first.Restarts != 0 || !slices.Equal(first.Ports, []int{1234}) {
		t.Fatalf("after Start: %+v", first)
	}
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	xdstest.Eventually(t, 20*time.Second, "four restarts, the last process running", func() bool {
		st := s.Status()[0]
		return st.Restarts == 4 && st.State == Running
	})
	st := s.Status()[0]
	if st.LastExit == nil || st.LastExit.Code != 4 || st.LastExit.Status != "exit status 4" || st.LastExit.Uptime < time.Second {
		t.Fatalf("last exit: %+v", st.LastExit)
	}
	if st.PID == first.PID || int(starts.Load()) != 5 {
		t.Fatalf("pid %d (first %d), %d starts", st.PID, first.PID, starts.Load())
	}
	rec.mu.Lock()
	got := slices.Clone(rec.backoffs["c"])
	rec.mu.Unlock()
	want := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond, 10 * time.Millisecond}
	if !slices.Equal(got, want) {
		t.Fatalf("restart delays %v, want %v (doubling to the cap, reset after a long run)", got, want)
	}
}

// The first exit a SIGKILL: recorded as a signal, not an exit code.
func TestExitBySignalIsRecorded(t *testing.T) {
	s := New(Config{MinBackoff: time.Hour})
	defer s.Stop()
	if err := s.Start(context.Background(), Child{Name: "c", Start: func(int) (*exec.Cmd, error) { return sh("exec sleep 60") }}); err != nil {
		t.Fatal(err)
	}
	pid := s.Status()[0].PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	xdstest.Eventually(t, 10*time.Second, "the exit recorded", func() bool { return s.Status()[0].State == Backoff })
	st := s.Status()[0]
	if e := st.LastExit; e == nil || e.PID != pid || e.Code != -1 || e.Signal != "killed" || e.Status != "signal: killed" {
		t.Fatalf("exit: %+v", e)
	}
	if st.Backoff != time.Hour || st.NextStart.Sub(st.LastExit.At) != time.Hour {
		t.Fatalf("backoff %v, next start %v", st.Backoff, st.NextStart)
	}
}

// Stop restarts nothing: running children get SIGTERM (SIGKILL after
// StopTimeout for one that ignores it), a child waiting for its restart is
// not started again, and every child ends Stopped.
func TestStopRestartsNothing(t *testing.T) {
	rec := &recorder{}
	s := New(Config{MinBackoff: time.Hour, StopTimeout: 300 * time.Millisecond, OnChange: rec.onChange})
	var starts atomic.Int32
	for _, c := range []struct{ name, script string }{
		{"plain", "echo ready; exec sleep 60"},
		// Ready once SIGTERM is ignored.
		{"stubborn", `trap "" TERM; echo ready; while :; do sleep 0.05; done`},
		{"waiting", "echo ready; exec sleep 60"},
	} {
		var stdout *bufio.Reader
		err := s.Start(context.Background(), Child{Name: c.name,
			Start: func(int) (*exec.Cmd, error) {
				starts.Add(1)
				cmd := exec.Command("sh", "-c", c.script)
				out, err := cmd.StdoutPipe()
				if err != nil {
					return nil, err
				}
				stdout = bufio.NewReader(out)
				return cmd, cmd.Start()
			},
			Ready: func(context.Context) error {
				line, err := stdout.ReadString('\n')
				if err == nil && line != "ready\n" {
					err = fmt.Errorf("printed %q", line)
				}
				return err
			}})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Kill(s.Status()[2].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	xdstest.Eventually(t, 10*time.Second, "waiting in backoff", func() bool { return s.Status()[2].State == Backoff })
	s.Stop()
	for _, st := range s.Status() {
		if st.State != Stopped || st.Restarts != 0 || st.LastExit == nil {
			t.Errorf("%s after Stop: %+v", st.Name, st)
		}
		if err := syscall.Kill(st.PID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s: pid %d still there: %v", st.Name, st.PID, err)
		}
	}
	if sig := s.Status()[0].LastExit.Signal; sig != "terminated" {
		t.Errorf("plain ended by %q, want SIGTERM", sig)
	}
	if sig := s.Status()[1].LastExit.Signal; sig != "killed" {
		t.Errorf("stubborn ended by %q, want SIGKILL after the timeout", sig)
	}
	if n := starts.Load(); n != 3 {
		t.Errorf("%d processes started, want 3", n)
	}
	// OnChange saw the end.
	for _, name := range []string{"plain", "stubborn", "waiting"} {
		if st := rec.status(name); st.State != Stopped {
			t.Errorf("last reported state of %s: %s", name, st.State)
		}
	}
	if err := s.Start(context.Background(), Child{Name: "late", Start: func(int) (*exec.Cmd, error) { return sh("exit 0") }}); !errors.Is(err, ErrStopped) {
		t.Errorf("Start after Stop: %v", err)
	}
}

// A first process that exits before it is ready fails Start, and is not
// restarted.
func TestStartFailsWhenTheChildExitsBeforeReady(t *testing.T) {
	s := New(Config{MinBackoff: time.Millisecond})
	defer s.Stop()
	err := s.Start(context.Background(), Child{Name: "bad",
		Start: func(int) (*exec.Cmd, error) { return sh("exit 2") },
		Ready: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }})
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready (exit status 2)") {
		t.Fatalf("Start: %v", err)
	}
	if st := s.Status()[0]; st.State != Failed || st.Restarts != 0 || st.LastExit == nil || st.LastExit.Code != 2 {
		t.Fatalf("status: %+v", st)
	}
}

// BeforeRestart holds a restart (state Held, the old pid, no new process),
// and a restarted process is Starting until Ready says it serves.
func TestRestartIsHeldThenStartingUntilReady(t *testing.T) {
	release, serve := make(chan struct{}), make(chan struct{})
	var readyCalls, starts atomic.Int32
	s := New(Config{MinBackoff: time.Millisecond})
	defer s.Stop()
	err := s.Start(context.Background(), Child{Name: "c",
		Start: func(int) (*exec.Cmd, error) { starts.Add(1); return sh("exec sleep 60") },
		Ready: func(ctx context.Context) error {
			if readyCalls.Add(1) == 1 {
				return nil
			}
			select {
			case <-serve:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		BeforeRestart: func(ctx context.Context, _ *slog.Logger) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	old := s.Status()[0].PID
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	xdstest.Eventually(t, 10*time.Second, "the restart held", func() bool { return s.Status()[0].State == Held })
	if st := s.Status()[0]; st.PID != old || starts.Load() != 1 || st.Restarts != 0 {
		t.Fatalf("while held: %+v, %d starts", st, starts.Load())
	}
	close(release)
	xdstest.Eventually(t, 10*time.Second, "the new process starting", func() bool { return s.Status()[0].State == Starting })
	if st := s.Status()[0]; st.PID == old || st.Restarts != 1 {
		t.Fatalf("restarted: %+v", st)
	}
	close(serve)
	xdstest.Eventually(t, 10*time.Second, "the new process running", func() bool { return s.Status()[0].State == Running })
}
