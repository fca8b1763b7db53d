package launcher

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portico-io/portico/internal/identity"
	"github.com/portico-io/portico/internal/pki"
)

// plaintextPorts are the only ports of make run's processes allowed to
// serve without TLS (ARCHITECTURE.md, "Trust and identity"): health and
// metrics endpoints, and the demo upstream, which stands for a user's
// service behind Envoy rather than a platform port. Each must answer
// /readyz or /healthz in plaintext, so an API cannot hide here. Postgres
// and Redis (the loopback dev databases) are started by make deps, not by
// the launcher, so they are not in the processes' socket lists at all.
var plaintextPorts = map[string]func(name string) int{
	"extauthz":      func(string) int { return 18101 },
	"ratelimitsvc":  func(string) int { return 18201 },
	"echo-upstream": func(string) int { return 18900 },
	"cachenode":     func(name string) int { return 18700 + index(name) },
}

// roleOf is the role whose certificate a process's TLS ports must present.
var roleOf = map[string]identity.Role{
	"controlplane": identity.ControlPlane, "extauthz": identity.ExtAuthz, "ratelimitsvc": identity.RateLimit,
	"scheduler": identity.Scheduler, "kvnode": identity.KVNode, "cachenode": identity.CacheNode,
}

// everyPortSpeaksTLS asks the kernel which TCP ports each process of the
// run listens on, and requires each one to complete a TLS handshake whose
// server certificate chains to the run's platform CA and carries the
// process's role — unless it is one of the documented plaintext
// health/metrics ports. Ports come from /proc, not from a list in the
// launcher, so a listener added later cannot slip by.
func (r *makeRun) everyPortSpeaksTLS(t *testing.T) {
	if _, err := os.Stat("/proc/self/net/tcp"); err != nil {
		skipOrFail(t, "needs Linux /proc to list listening sockets")
	}
	caPEM, err := os.ReadFile(filepath.Join(PKIDir(r.root), pki.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	op, err := tls.LoadX509KeyPair(filepath.Join(PKIDir(r.root), "operator.crt"), filepath.Join(PKIDir(r.root), "operator.key"))
	if err != nil {
		t.Fatal(err)
	}

	listening := listeningPorts(t)
	seen := map[int]bool{}
	for name, pid := range r.processes() {
		// Envoy's listeners are the data plane's, made from the demo
		// config (plaintext :10000 among them); the e2e Envoy tests check
		// them. This test holds the platform's own processes.
		if name == "envoy" {
			continue
		}
		ports := listening(pid)
		if len(ports) == 0 {
			t.Errorf("%s (pid %d) listens on no TCP port", name, pid)
		}
		kind := strings.TrimRight(strings.TrimSuffix(name, "-"), "-0123456789")
		for _, port := range ports {
			seen[port] = true
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			if allowed, ok := plaintextPorts[kind]; ok && allowed(name) == port {
				if err := answersHealth(addr); err != nil {
					t.Errorf("%s: plaintext port %d is not a health/metrics endpoint: %v", name, port, err)
				}
				continue
			}
			id, err := tlsIdentity(addr, roots, op)
			if err != nil {
				t.Errorf("%s: port %d does not speak TLS with a platform certificate: %v", name, port, err)
				continue
			}
			if want, ok := roleOf[kind]; !ok || id.Role != want {
				t.Errorf("%s: port %d presents %s, want role %s", name, port, id, want)
			}
		}
	}
	// The listing must have found the documented ports, or it proves nothing.
	want := []int{18000, 18080, 18100, 18101, 18200, 18201, 18300, 18301}
	for i := range 3 {
		want = append(want, 18400+i, 18500+i, 18600+i)
	}
	for i := range CacheNodes {
		want = append(want, 7000+i, 17000+i, 18700+i)
	}
	for _, p := range want {
		if !seen[p] {
			t.Errorf("port %d (ARCHITECTURE.md) was not found listening", p)
		}
	}
}

// tlsIdentity completes a TLS handshake with addr, verifying the server's
// chain against roots, and returns the SPIFFE ID of its certificate. The
// operator certificate is offered for ports that ask for one; ports that
// admit other roles only refuse it after the handshake, which is fine
// here: the question is whether the port speaks TLS, and as whom.
func tlsIdentity(addr string, roots *x509.CertPool, cert tls.Certificate) (identity.ID, error) {
	d := &net.Dialer{Timeout: 3 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{RootCAs: roots, ServerName: "localhost",
		Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return identity.ID{}, err
	}
	defer conn.Close()
	chain := conn.ConnectionState().PeerCertificates
	if len(chain) == 0 {
		return identity.ID{}, errors.New("no server certificate")
	}
	return identity.FromCert(chain[0])
}

// answersHealth is true for an HTTP health endpoint.
func answersHealth(addr string) error {
	hc := &http.Client{Timeout: 3 * time.Second}
	var last error
	for _, path := range []string{"/readyz", "/healthz"} {
		resp, err := hc.Get("http://" + addr + path)
		if err != nil {
			last = err
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		last = fmt.Errorf("GET %s: %d", path, resp.StatusCode)
	}
	return last
}

// listeningPorts reads the kernel's TCP tables once and returns a function
// giving the ports a process listens on (its socket fds matched to LISTEN
// entries by inode).
func listeningPorts(t *testing.T) func(pid int) []int {
	t.Helper()
	byInode := map[string]int{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" { // 0A = LISTEN
				continue
			}
			_, hexPort, _ := strings.Cut(fields[1], ":")
			port, err := strconv.ParseInt(hexPort, 16, 32)
			if err != nil {
				t.Fatalf("%s: %q", table, fields[1])
			}
			byInode[fields[9]] = int(port)
		}
		f.Close()
	}
	if len(byInode) == 0 {
		t.Fatal("no listening sockets in /proc/net/tcp{,6}")
	}
	return func(pid int) []int {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			t.Errorf("pid %d: %v", pid, err)
			return nil
		}
		var ports []int
		for _, fd := range fds {
			link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}
			if port, ok := byInode[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")]; ok && !slices.Contains(ports, port) {
				ports = append(ports, port)
			}
		}
		slices.Sort(ports)
		return ports
	}
}

// buildBinaries builds the commands the launcher starts, and the extra
// ones named (what the README examples run from bin/), into root/bin, with
// the test binary's race setting so the build reuses its compiled packages.
func buildBinaries(t *testing.T, root string, extra []string) {
	t.Helper()
	repo, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	names := slices.Clone(extra)
	procs, err := Processes(root, StoreRedis) // the same programs with either store
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		names = append(names, filepath.Base(p.Args[0]))
	}
	var pkgs []string
	for _, name := range names {
		dirs, _ := filepath.Glob(filepath.Join(repo, "*", "cmd", name))
		if len(dirs) != 1 {
			t.Fatalf("no single package */cmd/%s builds bin/%s: %v", name, name, dirs)
		}
		if rel := "./" + strings.TrimPrefix(dirs[0], repo+"/"); !slices.Contains(pkgs, rel) {
			pkgs = append(pkgs, rel)
		}
	}
	args := []string{"build", "-o", filepath.Join(root, "bin") + "/"}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, pkgs...)...)
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
}

func index(name string) int {
	i, _ := strconv.Atoi(name[strings.LastIndex(name, "-")+1:])
	return i
}

// skipOrFail skips the test, or fails it under CI, where every dependency
// must be present.
func skipOrFail(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}
