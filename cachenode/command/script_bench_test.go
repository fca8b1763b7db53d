package command

import (
	"os"
	"strconv"
	"testing"

	"github.com/portico-io/portico/cachenode/resp"
)

// BenchmarkExecEvalSha measures the command layer alone (no network) on
// ratelimitsvc's check.lua: one token bucket per EVALSHA, Redis TIME as
// the clock, 1024 buckets.
func BenchmarkExecEvalSha(b *testing.B) {
	body, err := os.ReadFile("../../ratelimitsvc/bucket/check.lua")
	if err != nil {
		b.Fatal(err)
	}
	e, _ := newFuzzEngine(b)
	s := e.NewSession("bench")
	var w resp.Writer
	e.Exec(s, [][]byte{[]byte("SCRIPT"), []byte("LOAD"), body}, &w)
	sha := append([]byte(nil), w.Buf[len(w.Buf)-42:len(w.Buf)-2]...)
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte("rl:{" + strconv.Itoa(i) + "}")
	}
	args := [][]byte{[]byte("EVALSHA"), sha, []byte("1"), nil, []byte(""), []byte("0"), []byte("t"), []byte("100"),
		[]byte("100"), []byte("1000"), []byte("1"), []byte("1"), []byte("0")}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		args[3] = keys[i&1023]
		i++
		w.Reset()
		e.Exec(s, args, &w)
		if w.Buf[0] != '*' {
			b.Fatalf("EVALSHA: %q", w.Buf)
		}
	}
}
