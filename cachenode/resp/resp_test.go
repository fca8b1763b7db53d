package resp

import "testing"

func TestWriterEncodesPerProtocol(t *testing.T) {
	write := func(w *Writer) {
		w.Null()
		w.NullArray()
		w.Map(1)
		w.BulkString("k")
		w.Int(-7)
		w.Set(1)
		w.Bulk([]byte("m"))
		w.Double(1.5)
		w.Verbatim("a:b")
		w.Error("ERR bad\r\nthing")
		w.Simple("OK")
	}
	for _, tc := range []struct {
		proto int
		want  string
	}{
		{2, "$-1\r\n*-1\r\n*2\r\n$1\r\nk\r\n:-7\r\n*1\r\n$1\r\nm\r\n$3\r\n1.5\r\n$3\r\na:b\r\n-ERR bad  thing\r\n+OK\r\n"},
		{3, "_\r\n_\r\n%1\r\n$1\r\nk\r\n:-7\r\n~1\r\n$1\r\nm\r\n,1.5\r\n=7\r\ntxt:a:b\r\n-ERR bad  thing\r\n+OK\r\n"},
	} {
		w := &Writer{Proto: tc.proto}
		write(w)
		if string(w.Buf) != tc.want {
			t.Errorf("RESP%d:\n got %q\nwant %q", tc.proto, w.Buf, tc.want)
		}
		w.Reset()
		if len(w.Buf) != 0 {
			t.Error("Reset kept bytes")
		}
	}
}
