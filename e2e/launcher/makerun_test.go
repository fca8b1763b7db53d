package launcher

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/testdeps"
)

// repoRoot is the checkout this package's tests run in.
const repoRoot = "../.."

// TestMakeRun runs make run's launcher once on this machine (every
// component as its own OS process on make run's fixed ports, the demo
// seeded) and checks it from several sides, the launcher's supervision
// last. Starting the platform is the expensive part, so every check shares
// the one start.
func TestMakeRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole platform")
	}
	examples := readmeBlocks(t)
	r := startMakeRun(t, binariesRun(examples), StoreRedis)
	t.Run("EveryPortSpeaksTLS", r.everyPortSpeaksTLS)
	t.Run("READMEExamples", func(t *testing.T) { r.readmeExamples(t, examples) })
	// Last: it kills a cache primary, and the map stays reshaped after.
	t.Run("SupervisedFailover", r.supervisedFailover)
}

// makeRun is a running launcher, as `make run` leaves it.
type makeRun struct {
	// root is where bin/, envoy/ and .run/ are, as in a checkout after
	// make run: the README's relative paths resolve against it.
	root string
	// envoy is the Envoy binary the launcher started, or "" without one.
	envoy string
	// out is what the launcher printed.
	out *syncBuffer
	// store is ratelimitsvc's (Config.RateLimitStore).
	store string

	mu   sync.Mutex
	pids map[string]int
	// started names the processes in the order they first started.
	started []string
}

// processes returns the name of every process started so far and its
// latest pid (the launcher reports restarts too).
func (r *makeRun) processes() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.pids)
}

// startMakeRun builds the binaries (the launcher's and extra) into a fresh
// root, starts the launcher there with make run's settings (Envoy when one
// is installed) and ratelimitsvc's buckets in store, waits until it is
// ready and seeded, and stops it when t ends. It skips, or fails under CI,
// when make run's ports or databases are not what it needs.
func startMakeRun(t *testing.T, extra []string, store string) *makeRun {
	t.Helper()
	r := &makeRun{root: t.TempDir(), envoy: envoyBinary(), store: store, pids: map[string]int{}}
	ports := []int{18000, 18080, 18300, 18400, 7000}
	if r.envoy != "" {
		ports = append(ports, 10000, 9901, 6380)
	}
	for _, port := range ports {
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err != nil {
			skipOrFail(t, fmt.Sprintf("port %d is taken (is make run running? make stop): %v", port, err))
		} else {
			l.Close()
		}
	}
	t.Setenv("PORTICO_DATABASE_URL", testdeps.Postgres(t))
	if addr := testdeps.Redis(t); store == StoreRedis && addr != "127.0.0.1:56379" {
		skipOrFail(t, fmt.Sprintf("make run's ratelimitsvc uses the Redis of make deps (127.0.0.1:56379); this machine's is %s", addr))
	}
	start := time.Now()
	buildBinaries(t, r.root, extra)
	t.Logf("built the binaries in %v", time.Since(start).Round(time.Millisecond))
	if r.envoy != "" {
		// Envoy's bootstrap and SDS files, at the paths make run uses.
		if err := os.CopyFS(filepath.Join(r.root, "envoy"), os.DirFS(filepath.Join(repoRoot, "envoy"))); err != nil {
			t.Fatal(err)
		}
	}

	start = time.Now()
	out := &syncBuffer{}
	r.out = out
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Root: r.root, EnvoyBin: r.envoy, NoEnvoy: r.envoy == "", Out: out, RateLimitStore: store,
			Started: func(name string, pid int) {
				r.mu.Lock()
				defer r.mu.Unlock()
				if _, again := r.pids[name]; !again {
					r.started = append(r.started, name)
				}
				r.pids[name] = pid
			},
			Ready: func() { close(ready) }})
	}()
	t.Cleanup(func() {
		before, _ := ReadStatus(r.root)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("launcher: %v", err)
		}
		if before != nil && before.Launcher.State == LauncherRunning {
			r.stoppedEverything(t, before)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		done <- err
		t.Fatalf("make run did not come up: %v\n%s", err, out.String())
	case <-time.After(3 * time.Minute):
		t.Fatalf("make run not ready after 3 minutes\n%s", out.String())
	}
	t.Logf("make run was up in %v (Envoy: %s, rate limits in %s)", time.Since(start).Round(time.Millisecond), orNone(r.envoy), store)
	return r
}

// envoyBinary is the Envoy make run would start: $ENVOY_BIN, else envoy on
// PATH, else "".
func envoyBinary() string {
	if p := os.Getenv("ENVOY_BIN"); p != "" {
		return p
	}
	p, _ := exec.LookPath("envoy")
	return p
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// syncBuffer is a bytes.Buffer the launcher writes to while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
