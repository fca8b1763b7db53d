package launcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/portico-io/portico/e2e/launcher/supervisor"
)

// The launcher's own states in the status file.
const (
	LauncherStarting = "starting" // starting the components, seeding the demo
	LauncherRunning  = "running"  // everything started; supervising
	LauncherStopping = "stopping" // stopping the components
	LauncherStopped  = "stopped"  // Run returned
	// LauncherGone is never written: ReadStatus reports it when the file
	// says the launcher runs but its process is gone (killed, crashed), so
	// the components' states in the file are the last it knew.
	LauncherGone = "gone"
)

// ErrNotRunning: no launcher runs at this root.
var ErrNotRunning = errors.New("launcher: not running")

// StatusPath is the status file of the run at root: what the launcher's
// supervisor knows, rewritten (atomically) on every change.
func StatusPath(root string) string { return filepath.Join(root, ".run", "status.json") }

// StatusFile is the content of StatusPath.
type StatusFile struct {
	Launcher   LauncherStatus      `json:"launcher"`
	Components []supervisor.Status `json:"components"`
}

// LauncherStatus describes the launcher process.
type LauncherStatus struct {
	PID   int    `json:"pid"`
	State string `json:"state"`
	// ProcStart is the process's start time in clock ticks since boot
	// (/proc/<pid>/stat), which tells the launcher from a later process
	// that reuses its pid; 0 where /proc is missing.
	ProcStart uint64    `json:"procStart,omitempty"`
	StartedAt time.Time `json:"startedAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// statusWriter keeps StatusPath up to date. Safe for concurrent use.
type statusWriter struct {
	path string
	mu   sync.Mutex
	f    StatusFile
}

func newStatusWriter(root string, pid int, started time.Time) *statusWriter {
	start, _ := procStart(pid)
	return &statusWriter{path: StatusPath(root), f: StatusFile{Launcher: LauncherStatus{PID: pid, ProcStart: start, StartedAt: started}}}
}

func (w *statusWriter) launcher(state string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.f.Launcher.State = state
	return w.writeLocked()
}

func (w *statusWriter) components(st []supervisor.Status) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.f.Components = st
	return w.writeLocked()
}

// writeLocked replaces the file by a complete new one (write, rename), so
// a reader never sees half of it.
func (w *statusWriter) writeLocked() error {
	w.f.Launcher.UpdatedAt = time.Now()
	data, err := json.MarshalIndent(w.f, "", "  ")
	if err != nil {
		return err
	}
	tmp := w.path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, w.path)
}

// ReadStatus reads the status of the run at root. A file saying the
// launcher runs whose process is gone reads as LauncherGone. Without a
// file it returns an error wrapping ErrNotRunning.
func ReadStatus(root string) (*StatusFile, error) {
	data, err := os.ReadFile(StatusPath(root))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w (no %s: make run writes it)", ErrNotRunning, StatusPath(root))
	}
	if err != nil {
		return nil, err
	}
	var f StatusFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", StatusPath(root), err)
	}
	if f.Launcher.State != LauncherStopped && !launcherAlive(f.Launcher) {
		f.Launcher.State = LauncherGone
	}
	return &f, nil
}

// launcherAlive reports whether the launcher's process still runs: its
// pid exists and, where /proc tells, started when the launcher did.
func launcherAlive(l LauncherStatus) bool {
	if l.PID <= 0 {
		return false
	}
	if err := syscall.Kill(l.PID, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	if l.ProcStart == 0 {
		return true
	}
	start, err := procStart(l.PID)
	return err != nil || start == l.ProcStart
}

// procStart is field 22 of /proc/<pid>/stat: when the process started, in
// clock ticks after boot.
func procStart(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return 0, errors.New("malformed /proc stat")
	}
	return strconv.ParseUint(fields[19], 10, 64) // field 22 = 3 + 19
}

// PrintStatus writes the status of the run at root as a table: the
// launcher, then each component's state, pid, restarts, uptime and ports,
// and its last exit. It returns an error wrapping ErrNotRunning (after
// printing what is known) when no launcher runs there.
func PrintStatus(w io.Writer, root string, now time.Time) error {
	f, err := ReadStatus(root)
	if err != nil {
		return err
	}
	l := f.Launcher
	switch l.State {
	case LauncherStopped:
		fmt.Fprintf(w, "portico: not running (the launcher stopped at %s)\n", l.UpdatedAt.Local().Format(time.DateTime))
		return ErrNotRunning
	case LauncherGone:
		fmt.Fprintf(w, "portico: not running: the launcher (pid %d) is gone without stopping its components; their last known state (%s):\n",
			l.PID, l.UpdatedAt.Local().Format(time.DateTime))
	default:
		fmt.Fprintf(w, "portico: %s (launcher pid %d, up %s)\n", l.State, l.PID, ago(now, l.StartedAt))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPONENT\tSTATE\tPID\tRESTARTS\tUPTIME\tPORTS\tLAST EXIT")
	for _, c := range f.Components {
		up := "-"
		switch c.State {
		case supervisor.Starting, supervisor.Running, supervisor.Stopping:
			up = ago(now, c.StartedAt)
		case supervisor.Backoff:
			up = "restart in " + max(c.NextStart.Sub(now), 0).Round(time.Second).String()
		case supervisor.Held:
			up = "held " + ago(now, c.Since)
		}
		ports := make([]string, len(c.Ports))
		for i, p := range c.Ports {
			ports[i] = strconv.Itoa(p)
		}
		last := "-"
		if e := c.LastExit; e != nil {
			last = fmt.Sprintf("%s, %s ago, after %s up", e.Status, ago(now, e.At), e.Uptime.Round(time.Second))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", c.Name, c.State, c.PID, c.Restarts, up, strings.Join(ports, ","), last)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if l.State == LauncherGone {
		fmt.Fprintln(w, "portico: components listed as live may still run, unsupervised; make stop stops them")
		return ErrNotRunning
	}
	return nil
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return max(now.Sub(t), 0).Round(time.Second).String()
}
