// Package resp is the wire protocol of a cache node: Writer encodes replies
// in RESP2 or RESP3, chosen per connection by HELLO, and Reader parses
// commands (multibulk and inline) with Redis's protocol errors and limits.
// Commands write through a Writer so the same handler serves both
// protocols: RESP3 types (map, set, null, double) degrade to their RESP2
// equivalents when the connection speaks RESP2.
//
// A Writer only appends to a byte slice; it never does I/O, so it is cheap
// to use in tests and fuzzing. Neither type is safe for concurrent use.
package resp

import (
	"math"
	"strconv"
)

// Writer appends encoded replies to Buf.
type Writer struct {
	Buf []byte
	// Proto is 2 or 3.
	Proto int
}

// Reset empties the buffer, keeping its capacity.
func (w *Writer) Reset() { w.Buf = w.Buf[:0] }

// Simple writes a simple string (+OK).
func (w *Writer) Simple(s string) {
	w.Buf = append(w.Buf, '+')
	w.Buf = append(w.Buf, s...)
	w.Buf = append(w.Buf, '\r', '\n')
}

// OK writes +OK.
func (w *Writer) OK() { w.Buf = append(w.Buf, "+OK\r\n"...) }

// Error writes an error; msg must start with its code ("ERR ...", "WRONGTYPE ...").
// CR and LF in msg are replaced so the reply stays one line.
func (w *Writer) Error(msg string) {
	w.Buf = append(w.Buf, '-')
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		w.Buf = append(w.Buf, c)
	}
	w.Buf = append(w.Buf, '\r', '\n')
}

// Int writes an integer.
func (w *Writer) Int(n int64) {
	w.Buf = append(w.Buf, ':')
	w.Buf = strconv.AppendInt(w.Buf, n, 10)
	w.Buf = append(w.Buf, '\r', '\n')
}

// Bulk writes a bulk string.
func (w *Writer) Bulk(b []byte) {
	w.Buf = append(w.Buf, '$')
	w.Buf = strconv.AppendInt(w.Buf, int64(len(b)), 10)
	w.Buf = append(w.Buf, '\r', '\n')
	w.Buf = append(w.Buf, b...)
	w.Buf = append(w.Buf, '\r', '\n')
}

// BulkString writes a bulk string.
func (w *Writer) BulkString(s string) {
	w.Buf = append(w.Buf, '$')
	w.Buf = strconv.AppendInt(w.Buf, int64(len(s)), 10)
	w.Buf = append(w.Buf, '\r', '\n')
	w.Buf = append(w.Buf, s...)
	w.Buf = append(w.Buf, '\r', '\n')
}

// Null writes a null bulk string (RESP2 $-1, RESP3 _).
func (w *Writer) Null() {
	if w.Proto == 3 {
		w.Buf = append(w.Buf, "_\r\n"...)
		return
	}
	w.Buf = append(w.Buf, "$-1\r\n"...)
}

// NullArray writes a null array (RESP2 *-1, RESP3 _).
func (w *Writer) NullArray() {
	if w.Proto == 3 {
		w.Buf = append(w.Buf, "_\r\n"...)
		return
	}
	w.Buf = append(w.Buf, "*-1\r\n"...)
}

func (w *Writer) header(c byte, n int) {
	w.Buf = append(w.Buf, c)
	w.Buf = strconv.AppendInt(w.Buf, int64(n), 10)
	w.Buf = append(w.Buf, '\r', '\n')
}

// Array writes an array header; n elements must follow.
func (w *Writer) Array(n int) { w.header('*', n) }

// Map writes a map header of n pairs; 2n elements must follow. RESP2 sees a
// flat array.
func (w *Writer) Map(n int) {
	if w.Proto == 3 {
		w.header('%', n)
		return
	}
	w.header('*', 2*n)
}

// Set writes a set header; n elements must follow (an array in RESP2).
func (w *Writer) Set(n int) {
	if w.Proto == 3 {
		w.header('~', n)
		return
	}
	w.header('*', n)
}

// Double writes a floating-point number (a bulk string in RESP2) as Redis
// 7.0 prints one: "%.17g", and "inf"/"-inf" for the infinities.
func (w *Writer) Double(f float64) {
	var tmp [32]byte
	d := AppendDouble(tmp[:0], f)
	if w.Proto == 3 {
		w.Buf = append(w.Buf, ',')
		w.Buf = append(w.Buf, d...)
		w.Buf = append(w.Buf, '\r', '\n')
		return
	}
	w.Bulk(d)
}

// AppendDouble appends f formatted as Double writes it.
func AppendDouble(dst []byte, f float64) []byte {
	switch {
	case math.IsInf(f, 1):
		return append(dst, "inf"...)
	case math.IsInf(f, -1):
		return append(dst, "-inf"...)
	}
	return strconv.AppendFloat(dst, f, 'g', 17, 64)
}

// Verbatim writes a verbatim text string (RESP3 =, bulk in RESP2), as INFO does.
func (w *Writer) Verbatim(s string) {
	if w.Proto == 3 {
		w.header('=', len(s)+4)
		w.Buf = append(w.Buf, "txt:"...)
		w.Buf = append(w.Buf, s...)
		w.Buf = append(w.Buf, '\r', '\n')
		return
	}
	w.BulkString(s)
}

// BulkStrings writes an array of bulk strings.
func (w *Writer) BulkStrings(ss []string) {
	w.Array(len(ss))
	for _, s := range ss {
		w.BulkString(s)
	}
}
