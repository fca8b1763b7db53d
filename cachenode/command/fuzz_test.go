package command

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/portico-io/portico/cachenode/cluster"
	"github.com/portico-io/portico/cachenode/namespace"
	"github.com/portico-io/portico/cachenode/resp"
)

// errIncomplete is returned by parseReply when the buffer ends mid-reply.
var errIncomplete = errors.New("incomplete reply")

// parseReply parses one RESP2/RESP3 value from b and returns the rest.
func parseReply(b []byte) ([]byte, error) {
	if len(b) == 0 {
		return nil, errIncomplete
	}
	i := bytes.Index(b, []byte("\r\n"))
	if i < 0 {
		return nil, errIncomplete
	}
	line, rest := b[1:i], b[i+2:]
	switch b[0] {
	case '+', '-', ':', ',', '_':
		if bytes.ContainsAny(line, "\r\n") {
			return nil, errors.New("newline in a simple reply")
		}
		if b[0] == ':' {
			if _, err := strconv.ParseInt(string(line), 10, 64); err != nil {
				return nil, errors.New("bad integer " + string(line))
			}
		}
		return rest, nil
	case '$', '=':
		n, err := strconv.Atoi(string(line))
		if err != nil || n < -1 {
			return nil, errors.New("bad bulk length")
		}
		if n == -1 {
			return rest, nil
		}
		if len(rest) < n+2 || string(rest[n:n+2]) != "\r\n" {
			return nil, errors.New("bad bulk body")
		}
		return rest[n+2:], nil
	case '*', '~', '%':
		n, err := strconv.Atoi(string(line))
		if err != nil || n < -1 {
			return nil, errors.New("bad aggregate length")
		}
		if b[0] == '%' {
			n *= 2
		}
		for range n {
			if rest, err = parseReply(rest); err != nil {
				return nil, err
			}
		}
		return rest, nil
	}
	return nil, errors.New("unknown reply type " + string(b[0]))
}

// splitArgs turns fuzz input into commands: '\n' separates commands, ' '
// separates arguments (so the corpus stays readable).
func splitArgs(data []byte) [][][]byte {
	var cmds [][][]byte
	for _, line := range bytes.Split(data, []byte("\n")) {
		if len(cmds) == 64 {
			break
		}
		var args [][]byte
		for _, a := range bytes.Split(line, []byte(" ")) {
			args = append(args, a)
		}
		cmds = append(cmds, args)
	}
	return cmds
}

func newFuzzEngine(t testing.TB) (*Engine, *namespace.Registry) { return newFuzzEngineIn(t, nil) }

// newFuzzClusterEngine is in cluster mode, owning half the slots.
func newFuzzClusterEngine(t testing.TB) *Engine {
	m, err := cluster.Parse([]byte(`{"epoch": 1, "nodes": [{"id": "me", "host": "h", "port": 1, "slots": ["0-8191"]},
		{"id": "b", "host": "h", "port": 2, "slots": ["8192-16383"]}]}`), "me")
	if err != nil {
		t.Fatal(err)
	}
	e, _ := newFuzzEngineIn(t, cluster.NewState(m))
	return e
}

func newFuzzEngineIn(t testing.TB, cl *cluster.State) (*Engine, *namespace.Registry) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	reg := namespace.NewRegistry(namespace.RegistryConfig{Shards: 4, Now: func() int64 { return now.UnixMilli() }})
	if err := reg.Apply([]namespace.Settings{{Name: "default"}, {Name: "t", HasSecret: true, Secret: sha("pw"), MaxMemory: 64 << 10, MaxValueSize: 4096}}); err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{Registry: reg, MaxMemory: 1 << 20, Now: func() time.Time { return now }, Cluster: cl})
	if err != nil {
		t.Fatal(err)
	}
	return e, reg
}

var fuzzSeeds = []string{
	"SET k v\nGET k\nSET k v EX 10 NX GET\nSET k v PX 0\nSET k v IFEQ v KEEPTTL",
	"INCR n\nINCRBY n 9223372036854775807\nDECRBY n -9223372036854775808\nINCRBYFLOAT n 1e308\nINCRBYFLOAT n 1e308",
	"LPUSH l a b c\nLRANGE l -100 100\nLPOP l -1\nRPOP l 0\nLREM l -1 a\nLTRIM l 9 -9\nLINDEX l -9223372036854775808",
	"SADD s a b\nSPOP s 100\nSRANDMEMBER s -5\nSINTER s s2 s\nSDIFF s\nSUNION s nosuch",
	"HSET h f v f2\nHSET h f 1\nHINCRBY h f 9223372036854775807\nHGETALL h\nHMGET h f x",
	"MSET a 1 b\nMSETNX a 1 b 2\nMGET a b c\nRENAME a a\nRENAME nosuch b",
	"EXPIRE k 9223372036854775807\nPEXPIREAT k -9223372036854775808\nEXPIRE k 1 NX XX GT LT\nTTL k\nPERSIST k",
	"SCAN 18446744073709551615 MATCH [ COUNT 0 TYPE\nKEYS [^a-\\\nKEYS *a*a*a*a*a*a*b\nSCAN 0 COUNT 9999999999999",
	"HELLO 3 AUTH t pw SETNAME x\nGET k\nHELLO 2\nAUTH t\nAUTH t nope\nAUTH",
	"COMMAND INFO get NOSUCH\nCOMMAND DOCS\nCOMMAND GETKEYS MSET a\nCOMMAND COUNT\nCOMMAND",
	"CLIENT SETNAME \x00\nCLIENT SETINFO lib-name\nCONFIG GET *\nCONFIG SET a b\nINFO everything\nTIME\nCACHE HOTKEYS nosuch",
	"CAS k a b EX -1\nCAS k v w PX 99999999999999999999\nGETEX k PERSIST EX 1\nGETDEL k\nAPPEND k \xff",
	"\nPING a b c\n \nQUIT\nSELECT -0\nFLUSHDB ASYNC extra\nDBSIZE x",
	"CLUSTER KEYSLOT {}\nCLUSTER GETKEYSINSLOT 0 9223372036854775807\nCLUSTER COUNTKEYSINSLOT -0\nCLUSTER SHARDS\nCLUSTER NODES\nASKING\nREADONLY",
	"MSET {a}1 x {a}2 y\nMGET foo bar\nCLUSTER SLOTS\nCLUSTER INFO\nCLUSTER MYID\nCLUSTER KEYSLOT\nCLUSTER nosuch",
}

func FuzzExec(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	standalone, _ := newFuzzEngine(f)
	clustered := newFuzzClusterEngine(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, e := range []*Engine{standalone, clustered} {
			fuzzRun(t, e, data)
		}
	})
}

func fuzzRun(t *testing.T, e *Engine, data []byte) {
	s := e.NewSession("fuzz")
	defer e.Close(s)
	var w resp.Writer
	for _, args := range splitArgs(data) {
		w.Reset()
		done := make(chan struct{})
		go func() {
			defer close(done)
			e.Exec(s, args, &w)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("Exec(%q) did not return", args)
		}
		rest, err := parseReply(w.Buf)
		if err != nil {
			t.Fatalf("Exec(%q) wrote a malformed reply %q: %v", args, w.Buf, err)
		}
		if len(rest) != 0 {
			t.Fatalf("Exec(%q) wrote more than one reply: %q", args, w.Buf)
		}
		if lookup(args[0]) == nil && w.Buf[0] != '-' {
			t.Fatalf("unknown command %q answered %q", args[0], w.Buf)
		}
	}
}

func sha(s string) [32]byte { return sha256.Sum256([]byte(s)) }
