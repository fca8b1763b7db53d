package cachenode_test

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// needTool returns the path of a Debian redis-tools binary. Missing tools
// fail the test under CI (make deps installs them) and skip it loudly
// otherwise.
func needTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		msg := name + " not found (Debian redis-tools, installed with redis-server by `make deps`): " + err.Error()
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPED LOUDLY: " + msg)
	}
	return p
}

func TestRedisCLI(t *testing.T) {
	cli := needTool(t, "redis-cli")
	n := startNode(t)
	host, port, _ := net.SplitHostPort(n.addrs.RESP)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"PING"}, "PONG"},
		{[]string{"SET", "k", "hello world"}, "OK"},
		{[]string{"GET", "k"}, "hello world"},
		{[]string{"RPUSH", "l", "a", "b"}, "2"},
		{[]string{"LRANGE", "l", "0", "-1"}, "a\nb"},
		{[]string{"-3", "HSET", "h", "f", "v"}, "1"},
		{[]string{"--no-raw", "-3", "HGETALL", "h"}, "1# \"f\" => \"v\""},
		{[]string{"--no-raw", "HGETALL", "h"}, "1) \"f\"\n2) \"v\""},
		{[]string{"GET", "nosuch"}, ""},
		{[]string{"--no-raw", "-3", "GET", "nosuch"}, "(nil)"},
		{[]string{"NOSUCH"}, "ERR unknown command 'NOSUCH', with args beginning with:"},
		{[]string{"DBSIZE"}, "3"},
	} {
		args := append([]string{"-h", host, "-p", port}, tc.args...)
		out, err := exec.CommandContext(ctx(t), cli, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v\n%s", tc.args, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("redis-cli %v = %q, want %q", tc.args, got, tc.want)
		}
	}
	// Interactive-style use through stdin, as scripts pipe commands.
	cmd := exec.CommandContext(ctx(t), cli, "-h", host, "-p", port)
	cmd.Stdin = strings.NewReader("INCR c\nINCR c\nINFO keyspace\n")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "1\n2\n") || !strings.Contains(string(out), "db0:keys=4") {
		t.Fatalf("redis-cli stdin: %v\n%s", err, out)
	}
}

// TestRedisBenchmark runs Debian's redis-benchmark unchanged against the
// node and checks that every test reports a throughput.
func TestRedisBenchmark(t *testing.T) {
	bench := needTool(t, "redis-benchmark")
	n := startNode(t)
	host, port, _ := net.SplitHostPort(n.addrs.RESP)
	tests := "ping,set,get,incr,lpush,rpop,sadd,hset,mset"
	out, err := exec.CommandContext(ctx(t), bench, "-h", host, "-p", port, "-t", tests, "-q", "-n", "2000", "-c", "10").CombinedOutput()
	if err != nil {
		t.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	// -q rewrites its progress line with \r; keep the final text of each line.
	rps := regexp.MustCompile(`^([A-Z_]+(?: \(10 keys\))?): ([0-9.]+) requests per second`)
	got := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.LastIndex(line, "\r"); i >= 0 {
			line = line[i+1:]
		}
		if m := rps.FindStringSubmatch(strings.TrimSpace(line)); m != nil && m[2] != "0.00" {
			got[m[1]] = true
		}
	}
	for _, want := range []string{"PING_INLINE", "PING_MBULK", "SET", "GET", "INCR", "LPUSH", "RPOP", "SADD", "HSET", "MSET (10 keys)"} {
		if !got[want] {
			t.Errorf("redis-benchmark reported no requests per second for %s", want)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// TestRawProtocol speaks RESP on a socket: inline commands, RESP2 and
// RESP3 null and aggregate encodings, HELLO switching protocols, and a
// protocol error answered with -ERR before the connection closes.
func TestRawProtocol(t *testing.T) {
	n := startNode(t)
	conn, err := net.Dial("tcp", n.addrs.RESP)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	send := func(s string) { conn.Write([]byte(s)) }
	expect := func(want string) {
		t.Helper()
		buf := make([]byte, len(want))
		if _, err := ioReadFull(r, buf); err != nil {
			t.Fatalf("reading %q: %v", want, err)
		}
		if string(buf) != want {
			t.Fatalf("got %q, want %q", buf, want)
		}
	}
	send("PING\r\n")
	expect("+PONG\r\n")
	send("SET k v\r\nGET nosuch\r\nSADD s a\r\n")
	expect("+OK\r\n$-1\r\n:1\r\n")
	send("*1\r\n$8\r\nSMEMBERS\r\n")
	expect("-ERR wrong number of arguments for 'smembers' command\r\n")
	send("*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n")
	expect("%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n")
	for i := 0; i < 21; i++ { // rest of the HELLO map
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	send("GET nosuch\r\nSMEMBERS s\r\nHSET h f v\r\nHGETALL h\r\nINCRBYFLOAT f 1.5\r\n")
	expect("_\r\n~1\r\n$1\r\na\r\n:1\r\n%1\r\n$1\r\nf\r\n$1\r\nv\r\n$3\r\n1.5\r\n")
	send("HELLO 2\r\n")
	expect("*14\r\n")
	for i := 0; i < 25; i++ {
		r.ReadString('\n')
	}
	send("HGETALL h\r\nLPOP nolist 2\r\n")
	expect("*2\r\n$1\r\nf\r\n$1\r\nv\r\n*-1\r\n")
	send("*1\r\n$abc\r\n")
	expect("-ERR Protocol error: invalid bulk length\r\n")
}
