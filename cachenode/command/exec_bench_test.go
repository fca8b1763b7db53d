package command

import (
	"strconv"
	"testing"

	"github.com/portico-io/portico/cachenode/resp"
)

// BenchmarkExecGetSet measures the command layer alone (no network): a
// SET and a GET of 100-byte values per iteration.
func BenchmarkExecGetSet(b *testing.B) {
	e, _ := newFuzzEngine(b)
	s := e.NewSession("bench")
	val := make([]byte, 100)
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte("key:" + strconv.Itoa(i))
	}
	set, get := [][]byte{[]byte("SET"), nil, val}, [][]byte{[]byte("GET"), nil}
	var w resp.Writer
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := keys[i&1023]
		i++
		set[1], get[1] = k, k
		w.Reset()
		e.Exec(s, set, &w)
		e.Exec(s, get, &w)
	}
}
