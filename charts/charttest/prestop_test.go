package charttest

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
)

// TestEnvoyPreStopHookAsksAdminToDrain runs the rendered preStop command
// with bash, pointed at a loopback listener instead of the admin port and
// with the sleep cut to zero, and checks that Envoy's admin would receive a
// well-formed POST /drain_listeners?graceful.
func TestEnvoyPreStopHookAsksAdminToDrain(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash on this machine")
	}
	objs := mustDecode(t, render(t, chartDir(t), nil))
	dep, ok := find[appsv1.Deployment](objs, "Deployment", fullName("envoy"))
	if !ok {
		t.Fatal("no Envoy Deployment")
	}
	c := dep.Spec.Template.Spec.Containers[0]
	cmd := c.Lifecycle.PreStop.Exec.Command
	if len(cmd) != 3 || cmd[0] != "/bin/bash" || cmd[1] != "-c" {
		t.Fatalf("preStop command %q: want /bin/bash -c <script>", cmd)
	}
	script := cmd[2]
	drain := ""
	for i, a := range c.Args {
		if a == "--drain-time-s" && i+1 < len(c.Args) {
			drain = c.Args[i+1]
		}
	}
	if !strings.Contains(script, "sleep "+drain) {
		t.Errorf("preStop must wait the drain time (%ss): %q", drain, script)
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	port := strconv.Itoa(lis.Addr().(*net.TCPAddr).Port)
	script = strings.Replace(script, "/dev/tcp/127.0.0.1/9901", "/dev/tcp/127.0.0.1/"+port, 1)
	script = strings.Replace(script, "sleep "+drain, "sleep 0", 1)
	if !strings.Contains(script, "/127.0.0.1/"+port) {
		t.Fatalf("the hook does not talk to the admin at 127.0.0.1:9901: %q", cmd[2])
	}

	got := make(chan *http.Request, 1)
	go func() {
		conn, err := lis.Accept()
		if err != nil {
			close(got)
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		req, err := http.ReadRequest(bufio.NewReader(conn))
		if err != nil {
			t.Errorf("hook request: %v", err)
			close(got)
			return
		}
		got <- req
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, bash, "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("preStop script: %v\n%s", err, out)
	}
	req, ok := <-got
	if !ok {
		t.Fatal("the hook sent no request")
	}
	if req.Method != http.MethodPost || req.URL.Path != "/drain_listeners" || !req.URL.Query().Has("graceful") {
		t.Errorf("hook sent %s %s, want POST /drain_listeners?graceful", req.Method, req.URL)
	}
}
