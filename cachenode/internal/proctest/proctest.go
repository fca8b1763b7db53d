// Package proctest builds this module's commands for tests and runs them as
// real processes with their output in log files: what cachenode's
// multi-process tests (kvnode groups, cache clusters with failover) start,
// kill, freeze and restart.
package proctest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

var (
	mu     sync.Mutex
	builds = map[string]*build{}
)

type build struct {
	once sync.Once
	path string
	err  error
}

// Build builds the command at pkg (a path relative to the module root, as
// "./kvnode/cmd/kvnode") once per test process and returns its binary:
// one file per user and name in the temp dir, replaced atomically by each
// build (the build cache makes a rebuild of unchanged code quick). A build
// failure fails the test: never a skip.
func Build(t testing.TB, pkg, name string) string {
	t.Helper()
	mu.Lock()
	b := builds[name]
	if b == nil {
		b = &build{}
		builds[name] = b
	}
	mu.Unlock()
	b.once.Do(func() {
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("portico-proctest-%d", os.Getuid()))
		if b.err = os.MkdirAll(dir, 0o700); b.err != nil {
			return
		}
		root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
		if err != nil {
			b.err = fmt.Errorf("go list -m: %w", err)
			return
		}
		tmp := filepath.Join(dir, fmt.Sprintf("%s.%d", name, os.Getpid()))
		cmd := exec.Command("go", "build", "-o", tmp, pkg)
		cmd.Dir = strings.TrimSpace(string(root))
		if out, err := cmd.CombinedOutput(); err != nil {
			os.Remove(tmp)
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
			return
		}
		b.path = filepath.Join(dir, name)
		if err := os.Rename(tmp, b.path); err != nil {
			os.Remove(tmp)
			b.err = err
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Proc is one command run repeatedly with the same arguments, its output
// appended to Log across restarts.
type Proc struct {
	Name string
	Bin  string
	Args []string
	Log  string

	mu  sync.Mutex
	cur *run
}

type run struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// Start starts the process (it must not be running).
func (p *Proc) Start() error {
	out, err := os.OpenFile(p.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	r := &run{cmd: cmd, exited: make(chan struct{})}
	go func() {
		r.err = cmd.Wait()
		out.Close()
		close(r.exited)
	}()
	p.mu.Lock()
	p.cur = r
	p.mu.Unlock()
	return nil
}

// Kill SIGKILLs the process and waits for it (no-op when not running). A
// frozen (SIGSTOPped) process dies too.
func (p *Proc) Kill() {
	p.mu.Lock()
	r := p.cur
	p.cur = nil
	p.mu.Unlock()
	if r != nil {
		_ = r.cmd.Process.Signal(syscall.SIGKILL)
		<-r.exited
	}
}

// Signal sends sig to the running process (SIGSTOP freezes it, SIGCONT
// resumes it).
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	r := p.cur
	p.mu.Unlock()
	if r == nil {
		return fmt.Errorf("%s is not running", p.Name)
	}
	return r.cmd.Process.Signal(sig)
}

// Running reports whether the process was started and not killed.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur != nil
}

// Exited returns an error with the log's tail when the process ended by
// itself, nil while it runs (or was never started or killed).
func (p *Proc) Exited() error {
	p.mu.Lock()
	r := p.cur
	p.mu.Unlock()
	if r == nil {
		return nil
	}
	select {
	case <-r.exited:
		return fmt.Errorf("%s exited (%v):\n%s", p.Name, r.err, p.Tail(2000))
	default:
		return nil
	}
}

// Tail is the last n bytes of the log.
func (p *Proc) Tail(n int) string {
	b, _ := os.ReadFile(p.Log)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
