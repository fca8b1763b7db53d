// Package peerbench holds what Portico's side-by-side benchmarks share, so
// that a skeptic can read one contract instead of several: each side is a
// process of its own (Portico's from its real command, built by Build), the
// sides run in alternating rounds (Order: ours, peer, peer, ours, repeated)
// so drift in a shared machine's load falls on both, every round is kept
// (not only the best), and the results are reported as
// tools/benchsummary reads them (Report).
//
// The reporting convention (BENCHMARKS.md, "Reading the output"): a metric
// whose unit ends in "-ratio" is Portico's figure divided by the peer's
// for the same quantity, the median over round pairs; "-ratio-min" and
// "-ratio-max" beside it give the spread. Ratios named for throughput are
// better above 1, ratios of latency or CPU below 1.
package peerbench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Side names one of the two systems in a round.
type Side int

const (
	Ours Side = iota
	Peer
)

func (s Side) String() string {
	if s == Ours {
		return "portico"
	}
	return "peer"
}

// Order returns the run order for rounds runs of each side: ours, peer,
// peer, ours, repeated, so neither side always goes first and a linear
// drift in load costs both sides the same. An odd rounds ends on ours,
// peer.
func Order(rounds int) []Side {
	var o []Side
	for i := range rounds {
		if i%2 == 0 {
			o = append(o, Ours, Peer)
		} else {
			o = append(o, Peer, Ours)
		}
	}
	return o
}

// Rounds runs ours and peer rounds times each, in Order, and returns each
// side's results in the order they ran: ours[i] and peer[i] ran next to
// each other.
func Rounds[R any](rounds int, ours, peer func(round int) R) (o, p []R) {
	for _, s := range Order(rounds) {
		if s == Ours {
			o = append(o, ours(len(o)))
		} else {
			p = append(p, peer(len(p)))
		}
	}
	return o, p
}

// Spread returns the median, minimum and maximum of xs (the mean of the
// two middle values for an even count). xs must not be empty.
func Spread(xs []float64) (median, lo, hi float64) {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		median = s[n/2]
	} else {
		median = (s[n/2-1] + s[n/2]) / 2
	}
	return median, s[0], s[n-1]
}

// Ratios returns ours[i]/peer[i] for each round pair.
func Ratios(ours, peer []float64) []float64 {
	r := make([]float64, min(len(ours), len(peer)))
	for i := range r {
		r[i] = ours[i] / peer[i]
	}
	return r
}

// Report reports name+"-ratio" (the median of ratios, one per round pair)
// and its spread as "-ratio-min" and "-ratio-max", the convention
// tools/benchsummary reads.
func Report(b *testing.B, name string, ratios []float64) {
	b.Helper()
	if len(ratios) == 0 {
		return
	}
	med, lo, hi := Spread(ratios)
	b.ReportMetric(med, name+"-ratio")
	b.ReportMetric(lo, name+"-ratio-min")
	b.ReportMetric(hi, name+"-ratio-max")
}

// Metric is one quantity a comparison reports from each round's result R.
type Metric[R any] struct {
	// Name is the ratio's name ("throughput": "throughput-ratio"), Unit
	// each side's mean's ("req/s": "portico-req/s", "peer-req/s").
	Name, Unit string
	Of         func(R) float64
}

// ReportMetrics reports each metric of the rounds ours and peer (in the
// order Rounds returns them): each side's mean and the ratios over round
// pairs (Report).
func ReportMetrics[R any](b *testing.B, ours, peer []R, metrics []Metric[R]) {
	b.Helper()
	values := func(rs []R, of func(R) float64) []float64 {
		out := make([]float64, len(rs))
		for i, r := range rs {
			out[i] = of(r)
		}
		return out
	}
	for _, m := range metrics {
		ov, pv := values(ours, m.Of), values(peer, m.Of)
		b.ReportMetric(Mean(ov), "portico-"+m.Unit)
		b.ReportMetric(Mean(pv), "peer-"+m.Unit)
		Report(b, m.Name, Ratios(ov, pv))
	}
}

// Mean returns the mean of xs (0 for none).
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// Build builds this module's command at pkg (relative to the module root,
// as "./ratelimitsvc/cmd/ratelimitsvc") into a temporary directory of tb
// and returns the binary: the benchmark runs what operators run, from the
// current source (the build cache makes a rebuild quick). A failed build
// fails tb.
func Build(tb testing.TB, pkg string) string {
	tb.Helper()
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		tb.Fatalf("go list -m: %v", err)
	}
	bin := filepath.Join(tb.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = strings.TrimSpace(string(root))
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// Proc is a benchmarked process. Its output is kept in memory (run the
// sides at warn level) and shown when it exits early.
type Proc struct {
	Name   string
	cmd    *exec.Cmd
	out    lockedBuffer
	exited chan struct{}
	once   sync.Once
}

// Start starts cmd (its Stdout and Stderr are taken over) and stops it
// when tb ends.
func Start(tb testing.TB, name string, cmd *exec.Cmd) *Proc {
	tb.Helper()
	p := &Proc{Name: name, cmd: cmd, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	tb.Cleanup(p.Stop)
	return p
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Output is what the process wrote so far.
func (p *Proc) Output() string { return p.out.String() }

// Exited is closed once the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Stop asks the process to exit (SIGTERM), kills it after 15 s, and waits.
// It may be called more than once.
func (p *Proc) Stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// CPUTime returns the user+system CPU time the process pid has used so far
// (from /proc, in clock ticks of 10 ms), 0 if it is gone.
func CPUTime(pid int) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The fields after the command name (which may hold spaces): utime and
	// stime are the 12th and 13th.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// BackendsCPU returns the CPU time of the Postgres backends on this
// machine serving database db, less those in skip (a benchmark's own
// connections). Backends gone since are not counted, so callers read it
// before and after the work while the connections are open.
func BackendsCPU(db string, skip []int32) time.Duration {
	var sum time.Duration
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || slices.Contains(skip, int32(pid)) {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.HasPrefix(string(cmd), "postgres: ") && strings.Contains(string(cmd), " "+db+" ") {
			sum += CPUTime(pid)
		}
	}
	return sum
}

// Machine describes where the benchmark runs, for its log: CPUs and the
// load average (1, 5, 15 min) right now.
func Machine() string {
	load := "?"
	if raw, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(raw)); len(f) >= 3 {
			load = strings.Join(f[:3], " ")
		}
	}
	return fmt.Sprintf("%d CPUs, load average %s", runtime.NumCPU(), load)
}
