package testdeps

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// RedisProc is a private redis-server process of one test: its own port
// and directory, no persistence unless args ask for it, killed when the
// test ends. Tests use it for what the shared Redis cannot give them: a
// Cluster, a Sentinel group, a server to kill and restart.
type RedisProc struct {
	Addr string
	Port int
	Dir  string

	t    testing.TB
	bin  string
	pre  []string // before the flags: a config file must come first
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
}

// RedisServer starts redis-server (from PATH, as `make deps` installs it)
// with extra config args ("--cluster-enabled", "yes", …) and waits until it
// answers PING. Without the binary the test is skipped, or failed in CI.
func RedisServer(t testing.TB, args ...string) *RedisProc {
	t.Helper()
	return redisProc(t, nil, args)
}

// RedisSentinel starts a Sentinel monitoring master (quorum 1) under name,
// declaring it down after downAfter without answers.
func RedisSentinel(t testing.TB, name string, master *RedisProc, downAfter time.Duration) *RedisProc {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 1\nsentinel down-after-milliseconds %[1]s %[3]d\nsentinel failover-timeout %[1]s 2000\n",
		name, master.Port, downAfter.Milliseconds())
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return redisProc(t, []string{conf, "--sentinel"}, nil)
}

func redisProc(t testing.TB, pre, args []string) *RedisProc {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "redis-server binary", "PATH", err)
	}
	port, err := PickPort()
	if err != nil {
		t.Fatal(err)
	}
	p := &RedisProc{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, Dir: t.TempDir(), t: t, bin: bin, pre: pre, args: args}
	p.Start()
	t.Cleanup(p.Kill)
	return p
}

// Start (re)starts the server on the same port and directory.
func (p *RedisProc) Start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return
	}
	args := append(append([]string{}, p.pre...), "--port", strconv.Itoa(p.Port), "--bind", "127.0.0.1", "--dir", p.Dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", filepath.Join(p.Dir, "redis.log"))
	args = append(args, p.args...)
	cmd := exec.Command(p.bin, args...)
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start redis-server: %v", err)
	}
	p.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for ping(p.Addr) != nil {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(p.Dir, "redis.log"))
			p.t.Fatalf("redis-server on %s did not answer in 10s; log:\n%s", p.Addr, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pid is the running server's process id (0 when it is not running):
// benchmarks read its CPU time.
func (p *RedisProc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Kill stops the server at once (SIGKILL), as a crash would.
func (p *RedisProc) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.cmd = nil
}

// CLI runs redis-cli against this server and returns its output.
func (p *RedisProc) CLI(args ...string) (string, error) {
	bin, err := exec.LookPath("redis-cli")
	if err != nil {
		return "", err
	}
	out, err := exec.Command(bin, append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(p.Port)}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("redis-cli %v: %w: %s", args, err, out)
	}
	return string(out), nil
}
