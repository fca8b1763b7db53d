package server

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/tidwall/redcon"

	"github.com/portico-io/portico/cachenode/resp"
)

// BenchmarkReadPipeline compares the connection read/reply path of
// tidwall/redcon (what the server used before) with resp.Reader: parse a
// pipelined batch of SETs with 100-byte values (redis-benchmark -P n -d
// 100), append one +OK per command, write the replies once per batch.
// ns/op is per batch.
func BenchmarkReadPipeline(b *testing.B) {
	for _, n := range []int{1, 16} {
		batch := setBatch(n)
		b.Run(fmt.Sprintf("redcon/P%d", n), func(b *testing.B) {
			rd := redcon.NewReader(&loopReader{data: batch})
			wr := redcon.NewWriter(io.Discard)
			b.SetBytes(int64(len(batch)))
			b.ReportAllocs()
			for b.Loop() {
				for got := 0; got < n; {
					cmds, err := rd.ReadCommands()
					if err != nil {
						b.Fatal(err)
					}
					for range cmds {
						wr.WriteRaw([]byte("+OK\r\n"))
					}
					got += len(cmds)
				}
				if err := wr.Flush(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("resp.Reader/P%d", n), func(b *testing.B) {
			rd := resp.NewReader(&loopReader{data: batch}, resp.Limits{})
			var w resp.Writer
			b.SetBytes(int64(len(batch)))
			b.ReportAllocs()
			for b.Loop() {
				for got := 0; got < n; {
					args, err := rd.Next()
					if err != nil {
						b.Fatal(err)
					}
					if args == nil {
						if err := rd.Fill(); err != nil {
							b.Fatal(err)
						}
						continue
					}
					w.OK()
					got++
				}
				if _, err := io.Discard.Write(w.Buf); err != nil {
					b.Fatal(err)
				}
				w.Reset()
			}
		})
	}
}

// loopReader is an endless stream of data repeated: a client that sends
// the next batch as soon as it is asked to. A Read returns at most the
// rest of the current copy.
type loopReader struct {
	data []byte
	off  int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := copy(p, l.data[l.off:])
	l.off = (l.off + n) % len(l.data)
	return n, nil
}

func setBatch(n int) []byte {
	var b bytes.Buffer
	val := strings.Repeat("x", 100)
	for i := range n {
		key := fmt.Sprintf("key:%012d", i)
		fmt.Fprintf(&b, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(key), key, len(val), val)
	}
	return b.Bytes()
}
