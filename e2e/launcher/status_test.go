package launcher

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/e2e/launcher/supervisor"
)

// The status file round-trips, and PrintStatus shows each component's
// state, pid, restarts, ports and last exit.
func TestStatusFileAndTable(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, ".run"), 0o755); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	w := newStatusWriter(root, os.Getpid(), now.Add(-time.Hour))
	if err := w.launcher(LauncherRunning); err != nil {
		t.Fatal(err)
	}
	err := w.components([]supervisor.Status{
		{Name: "controlplane", State: supervisor.Running, PID: 101, Ports: []int{18000, 18080}, StartedAt: now.Add(-time.Hour)},
		{Name: "cachenode-1", State: supervisor.Backoff, PID: 102, Restarts: 2, Ports: []int{7001, 17001, 18701},
			NextStart: now.Add(4 * time.Second), LastExit: &supervisor.Exit{PID: 102, At: now.Add(-time.Second), Status: "signal: killed",
				Code: -1, Signal: "killed", Uptime: 90 * time.Second}},
	})
	if err != nil {
		t.Fatal(err)
	}
	f, err := ReadStatus(root)
	if err != nil {
		t.Fatal(err)
	}
	if f.Launcher.State != LauncherRunning || len(f.Components) != 2 || f.Components[1].LastExit.Signal != "killed" {
		t.Fatalf("read back: %+v", f)
	}
	var out bytes.Buffer
	if err := PrintStatus(&out, root, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"portico: running (launcher pid ",
		"COMPONENT     STATE    PID  RESTARTS  UPTIME         PORTS             LAST EXIT",
		"controlplane  running  101  0         1h0m0s         18000,18080       -",
		"cachenode-1   backoff  102  2         restart in 4s  7001,17001,18701  signal: killed, 1s ago, after 1m30s up",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in:\n%s", want, out.String())
		}
	}
}

// A launcher that stopped, or whose process is gone, is not running; the
// status says which.
func TestStatusWhenNotRunning(t *testing.T) {
	root := t.TempDir()
	var out bytes.Buffer
	if err := PrintStatus(&out, root, time.Now()); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("without a status file: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(root, ".run"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A pid that is gone: a process that ran and was reaped.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	w := newStatusWriter(root, gone.Process.Pid, time.Now())
	if err := w.components([]supervisor.Status{{Name: "kvnode-0", State: supervisor.Running, PID: 5}}); err != nil {
		t.Fatal(err)
	}
	if err := w.launcher(LauncherRunning); err != nil {
		t.Fatal(err)
	}
	if f, err := ReadStatus(root); err != nil || f.Launcher.State != LauncherGone {
		t.Fatalf("a dead launcher's file reads as %+v, %v", f, err)
	}
	out.Reset()
	if err := PrintStatus(&out, root, time.Now()); !errors.Is(err, ErrNotRunning) ||
		!strings.Contains(out.String(), "is gone without stopping its components") || !strings.Contains(out.String(), "kvnode-0") {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	// This process, with another start time: a reused pid.
	w = newStatusWriter(root, os.Getpid(), time.Now())
	w.f.Launcher.ProcStart++
	if err := w.launcher(LauncherRunning); err != nil {
		t.Fatal(err)
	}
	if f, _ := ReadStatus(root); f.Launcher.State != LauncherGone {
		t.Fatalf("a reused pid reads as %s", f.Launcher.State)
	}
	w.f.Launcher.ProcStart--
	if err := w.launcher(LauncherStopped); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := PrintStatus(&out, root, time.Now()); !errors.Is(err, ErrNotRunning) || !strings.Contains(out.String(), "not running (the launcher stopped at") {
		t.Fatalf("%v:\n%s", err, out.String())
	}
}
