package testdeps

import (
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
)

// Ports handed out by FreePort lie below Linux's default ephemeral range
// (32768-60999): a port from that range, free when picked, can become an
// outgoing connection's local port before the process under test binds
// it. So does port+10000, Redis Cluster's bus port, which is checked free
// too. Picking at random keeps parallel test binaries apart.
const (
	portLow  = 20000
	portHigh = 22700
	busShift = 10000
)

// FreePort returns a loopback TCP port that was free a moment ago, and
// that no earlier call in this process returned, for a process or server
// the test starts with a fixed address.
func FreePort(tb testing.TB) int {
	tb.Helper()
	p, err := PickPort()
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// handedOut holds the ports PickPort returned in this process: a port is
// free again once picked (nothing holds it until the process under test
// binds it), so a second pick could return it to another process of the
// same test (a benchmark's three cluster nodes and their HTTP ports, seen
// failing as "did not answer PING").
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// PickPort is FreePort for callers without a testing.TB.
func PickPort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	for range 200 {
		p := portLow + rand.IntN(portHigh-portLow)
		if !handedOut.ports[p] && free(p) && free(p+busShift) {
			handedOut.ports[p] = true
			return p, nil
		}
	}
	return 0, errors.New("testdeps: no free port in 20000-22700 (with its +10000 free too)")
}

func free(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// FreeAddrs returns n distinct loopback host:port addresses, each picked
// as FreePort picks a port, for processes a test starts on fixed
// addresses (and restarts on the same ones).
func FreeAddrs(tb testing.TB, n int) []string {
	tb.Helper()
	seen := map[int]bool{}
	out := make([]string, 0, n)
	for len(out) < n {
		if p := FreePort(tb); !seen[p] {
			seen[p] = true
			out = append(out, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		}
	}
	return out
}
