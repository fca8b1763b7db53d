package launcher

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/slots"
	"github.com/portico-io/portico/cachenode/topology"
	"github.com/portico-io/portico/e2e/launcher/supervisor"
	"github.com/portico-io/portico/internal/xdstest"
)

// supervisedFailover is issue 23's "Must show" on the running make run: a
// cache primary killed with SIGKILL fails over (its replica promoted, writes
// through the cluster keep working), every other component stays up (same
// pid, ready, no restart), and the launcher restarts the killed node, which
// comes back as a replica of the promoted one. The status file says so at
// every step, and its ports are the ones each process listens on.
func (r *makeRun) supervisedFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// One configuration per client: the topology client's HTTP/2 setup
	// writes NextProtos into the one it is given.
	operatorTLS := func() *tls.Config {
		c, err := OperatorTLS(r.root)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	opTLS := operatorTLS()
	before := r.processes()
	r.statusIsTruthful(t, before)

	// A primary with a replica, from the stored map (earlier subtests may
	// have reshaped it).
	topo := &topology.Client{Addrs: kvAddrs, Cluster: CacheCluster, TLS: operatorTLS()}
	stored := func() *cluster.Spec {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		tp, err := topo.Load(lctx)
		if err != nil {
			t.Logf("reading the cache topology: %v", err)
			return nil
		}
		return &tp.Spec
	}
	spec := stored()
	if spec == nil {
		t.Fatal("no cache topology")
	}
	var victim, replica cluster.NodeSpec
	for _, n := range spec.Nodes {
		if n.ReplicaOf == "" || n.Failed || victim.ID != "" {
			continue
		}
		if p := nodeSpec(spec, n.ReplicaOf); len(p.Slots) > 0 && !p.Failed {
			victim, replica = p, n
		}
	}
	if victim.ID == "" {
		t.Fatalf("no primary with a live replica in the stored map: %+v", spec.Nodes)
	}
	victimName := "cachenode-" + strings.TrimPrefix(victim.ID, "cache-")
	t.Logf("killing %s (%s, primary of %v) whose replica is %s", victimName, victim.ID, victim.Slots, replica.ID)

	addrs := make([]string, CacheNodes)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", 7000+i)
	}
	// A dead primary cannot redirect: the client reloads the slot map every
	// second to ride through the failover (as TestClusterFailover's).
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Protocol: 2, TLSConfig: opTLS, MaxRedirects: 8,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second, ClusterStateReloadInterval: time.Second})
	defer cc.Close()
	direct := func(addr string) *redis.Client {
		return redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, TLSConfig: opTLS, MaxRetries: -1,
			DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second})
	}
	// A key in the victim's slots, written and replicated before the kill.
	key := keyOwnedBy(t, spec, victim.ID, "supervised")
	if err := cc.Set(ctx, key, "before", 0).Err(); err != nil {
		t.Fatalf("SET %s: %v", key, err)
	}
	rc := direct(fmt.Sprintf("%s:%d", replica.Host, replica.Port))
	defer rc.Close()
	if err := rc.ReadOnly(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	xdstest.Eventually(t, 30*time.Second, "the key on the replica", every(100*time.Millisecond, func() bool {
		return rc.Get(ctx, key).Val() == "before"
	}))

	killed := time.Now()
	if err := syscall.Kill(before[victimName], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The supervisor logs the exit and holds the restart (the victim owns
	// slots) until the cluster fails over.
	xdstest.Eventually(t, 30*time.Second, victimName+"'s exit in the status", every(50*time.Millisecond, func() bool {
		c, ok := r.component(t, victimName)
		return ok && c.LastExit != nil && c.LastExit.PID == before[victimName]
	}))
	if c, _ := r.component(t, victimName); c.LastExit.Signal != "killed" || c.LastExit.Code != -1 {
		t.Errorf("%s's exit in the status: %+v", victimName, c.LastExit)
	}
	xdstest.Eventually(t, 60*time.Second, replica.ID+" promoted in the stored map", every(200*time.Millisecond, func() bool {
		s := stored()
		return s != nil && len(nodeSpec(s, replica.ID).Slots) > 0 && nodeSpec(s, victim.ID).ReplicaOf == replica.ID
	}))
	promoted := time.Since(killed)
	var werr error
	xdstest.Eventually(t, 30*time.Second, "a write to the failed-over slots through the cluster", every(100*time.Millisecond, func() bool {
		werr = cc.Set(ctx, key+":after", "after", 0).Err()
		return werr == nil
	}))
	writable := time.Since(killed)
	if v, err := cc.Get(ctx, key).Result(); err != nil || v != "before" {
		t.Errorf("after the failover GET %s = %q, %v; want the replicated value", key, v, err)
	}

	// The killed node comes back, restarted by the launcher, as a replica
	// of the promoted node: the map says so (not failed), and so does the
	// node (role slave, linked to the new primary's bus port, holding the
	// write made after the failover).
	xdstest.Eventually(t, 60*time.Second, victimName+" restarted and ready", every(50*time.Millisecond, func() bool {
		c, ok := r.component(t, victimName)
		return ok && c.State == supervisor.Running && c.Restarts == 1 && c.PID != before[victimName] && r.processes()[victimName] == c.PID
	}))
	restarted := time.Since(killed)
	// The launcher logged the exit, structured, with its status.
	exitLog := regexp.MustCompile(`level=WARN msg="component exited; restarting it" component=` + victimName +
		` pid=` + strconv.Itoa(before[victimName]) + ` status="signal: killed" code=-1 signal=killed .* restarts=0 restart_in=1s`)
	if !exitLog.MatchString(r.out.String()) {
		t.Errorf("the launcher's output has no line matching %s:\n%s", exitLog, r.out.String())
	}
	vc := direct(fmt.Sprintf("%s:%d", victim.Host, victim.Port))
	defer vc.Close()
	busPort := replica.BusPort
	if busPort == 0 {
		busPort = replica.Port + 10000
	}
	var info string
	xdstest.Eventually(t, 60*time.Second, victimName+" replicating from "+replica.ID, every(100*time.Millisecond, func() bool {
		info, _ = vc.Info(ctx, "replication").Result()
		return strings.Contains(info, "role:slave") && strings.Contains(info, "master_port:"+strconv.Itoa(busPort)) &&
			strings.Contains(info, "master_link_status:up")
	}))
	if err := vc.ReadOnly(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	xdstest.Eventually(t, 30*time.Second, "the post-failover write on "+victimName, every(100*time.Millisecond, func() bool {
		return vc.Get(ctx, key+":after").Val() == "after"
	}))
	xdstest.Eventually(t, 30*time.Second, victim.ID+" no longer flagged failed", every(200*time.Millisecond, func() bool {
		s := stored()
		n := nodeSpec(s, victim.ID)
		return s != nil && n.ReplicaOf == replica.ID && !n.Failed && len(n.Slots) == 0
	}))
	if err := vc.Set(ctx, key, "direct", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED ") {
		t.Errorf("a write sent to the returned node directly: %v, want MOVED to the new primary", err)
	}
	t.Logf("SIGKILL %s → %s promoted %v, writes through the cluster %v, %s restarted and ready %v (last write error %v)",
		victimName, replica.ID, promoted.Round(time.Millisecond), writable.Round(time.Millisecond),
		victimName, restarted.Round(time.Millisecond), werr)

	// Every other component stayed up: same pid, never restarted, ready.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: operatorTLS()}}
	defer client.CloseIdleConnections()
	ready := map[string]string{}
	procs, err := Processes(r.root, r.store)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		ready[p.Name] = p.Ready
	}
	after := r.processes()
	for name, pid := range before {
		if name == victimName {
			continue
		}
		c, ok := r.component(t, name)
		if !ok || after[name] != pid || c.PID != pid || c.Restarts != 0 || c.State != supervisor.Running || c.LastExit != nil {
			t.Errorf("%s: pid %d → %d, status %+v", name, pid, after[name], c)
		}
		if url := ready[name]; url != "" {
			if err := getOK(ctx, client, url); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
	r.statusIsTruthful(t, r.processes())
	var out bytes.Buffer
	if err := PrintStatus(&out, r.root, time.Now()); err != nil {
		t.Fatal(err)
	}
	t.Logf("launch status:\n%s", out.String())
	if !strings.Contains(out.String(), "signal: killed") {
		t.Errorf("launch status does not show the kill:\n%s", out.String())
	}
}

// stoppedEverything checks a launcher stopped as on Ctrl-C: every
// component stopped and gone, none restarted during the shutdown.
func (r *makeRun) stoppedEverything(t *testing.T, before *StatusFile) {
	t.Helper()
	f, err := ReadStatus(r.root)
	if err != nil {
		t.Fatal(err)
	}
	if f.Launcher.State != LauncherStopped {
		t.Errorf("launcher state after the stop: %s", f.Launcher.State)
	}
	restarts := map[string]int{}
	for _, c := range before.Components {
		restarts[c.Name] = c.Restarts
	}
	for _, c := range f.Components {
		if c.State != supervisor.Stopped || c.Restarts != restarts[c.Name] {
			t.Errorf("%s after the stop: %s, %d restarts (%d before)", c.Name, c.State, c.Restarts, restarts[c.Name])
		}
		if err := syscall.Kill(c.PID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s: pid %d is still there after the stop: %v", c.Name, c.PID, err)
		}
	}
}

// statusIsTruthful checks the status file against the processes: the
// launcher running, every component running with the pid it was started
// with, and listening on exactly the ports the status lists.
func (r *makeRun) statusIsTruthful(t *testing.T, pids map[string]int) {
	t.Helper()
	f, err := ReadStatus(r.root)
	if err != nil {
		t.Fatal(err)
	}
	if f.Launcher.State != LauncherRunning || f.Launcher.PID != os.Getpid() {
		t.Errorf("launcher status %+v (this process, which runs it: %d)", f.Launcher, os.Getpid())
	}
	listening := listeningPorts(t)
	var names []string
	for _, c := range f.Components {
		names = append(names, c.Name)
		if c.State != supervisor.Running || c.PID != pids[c.Name] {
			t.Errorf("%s: %s pid %d in the status, started as pid %d", c.Name, c.State, c.PID, pids[c.Name])
			continue
		}
		if c.Name == "envoy" {
			continue // its listeners come from xDS, some only once config arrives
		}
		if got := listening(c.PID); !slices.Equal(got, sorted(c.Ports)) {
			t.Errorf("%s (pid %d) listens on %v, the status says %v", c.Name, c.PID, got, c.Ports)
		}
	}
	for name := range pids {
		if !slices.Contains(names, name) {
			t.Errorf("%s is missing from the status", name)
		}
	}
}

// component is name's entry in the status file.
func (r *makeRun) component(t *testing.T, name string) (supervisor.Status, bool) {
	f, err := ReadStatus(r.root)
	if err != nil {
		t.Logf("status: %v", err)
		return supervisor.Status{}, false
	}
	for _, c := range f.Components {
		if c.Name == name {
			return c, true
		}
	}
	return supervisor.Status{}, false
}

func nodeSpec(s *cluster.Spec, id string) cluster.NodeSpec {
	if s != nil {
		for _, n := range s.Nodes {
			if n.ID == id {
				return n
			}
		}
	}
	return cluster.NodeSpec{}
}

// keyOwnedBy returns a key "{prefix:i}" whose slot node id owns in spec:
// key+suffix has the same slot.
func keyOwnedBy(t *testing.T, spec *cluster.Spec, id, prefix string) string {
	t.Helper()
	m, err := spec.Map(id)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100000 {
		k := "{" + prefix + ":" + strconv.Itoa(i) + "}"
		if o := m.Owner(slots.Of([]byte(k))); o != nil && o.ID == id {
			return k
		}
	}
	t.Fatalf("no key of %s found", id)
	return ""
}

// every runs cond at most once per d (returning false in between), so a
// condition that makes a network call is not run every 10 ms by
// xdstest.Eventually.
func every(d time.Duration, cond func() bool) func() bool {
	var last time.Time
	return func() bool {
		if time.Since(last) < d {
			return false
		}
		last = time.Now()
		return cond()
	}
}

func getOK(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	return nil
}

func sorted(p []int) []int {
	p = slices.Clone(p)
	slices.Sort(p)
	return p
}
