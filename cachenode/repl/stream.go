package repl

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/portico-io/portico/cachenode/dump"
)

// The stream a primary sends after its +CONTINUE or +FULLRESYNC line is a
// sequence of frames: a tag byte, a uvarint payload length, the payload.
//
//	'H' shard header (full sync): ns, shard index, shard count as
//	    uvarint-prefixed name and uvarints, then O_s as a uvarint
//	'R' snapshot records (full sync): whole dump records of that shard
//	'E' end of snapshot (full sync), empty
//	'D' backlog bytes from the current offset on: dump records, which may
//	    span frames; the replica's offset advances by the payload length
//	'P' ping: the primary's offset (uvarint), sent every PingInterval
const (
	frameShard    = 'H'
	frameSnapshot = 'R'
	frameEnd      = 'E'
	frameData     = 'D'
	framePing     = 'P'
)

// maxFrame bounds a frame's payload: a snapshot frame holds at least one
// whole record.
const maxFrame = dump.MaxRecord + 1<<10

// frameHeaderRoom is the most a tag and payload length take.
const frameHeaderRoom = 1 + binary.MaxVarintLen32

// putFrameHeader writes the header of a frame whose payload starts at
// buf[frameHeaderRoom:] and returns where the frame starts.
func putFrameHeader(buf []byte, tag byte, n int) int {
	var h [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(h[:], uint64(n))
	at := frameHeaderRoom - 1 - k
	buf[at] = tag
	copy(buf[at+1:], h[:k])
	return at
}

// appendFrame appends a whole frame to dst.
func appendFrame(dst []byte, tag byte, payload []byte) []byte {
	dst = append(dst, tag)
	dst = binary.AppendUvarint(dst, uint64(len(payload)))
	return append(dst, payload...)
}

// frameReader reads frames. Its buffer grows only as payload bytes
// arrive, so a lying length costs a read error, not memory.
type frameReader struct {
	br  *bufio.Reader
	buf []byte
}

func (r *frameReader) next() (tag byte, payload []byte, err error) {
	tag, err = r.br.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	n, err := binary.ReadUvarint(r.br)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: frame length: %w", ErrStream, err)
	}
	if n > maxFrame {
		return 0, nil, fmt.Errorf("%w: frame of %d bytes", ErrStream, n)
	}
	r.buf = r.buf[:0]
	const chunk = 1 << 20
	for uint64(len(r.buf)) < n {
		k := int(min(n-uint64(len(r.buf)), chunk))
		at := len(r.buf)
		r.buf = append(r.buf, make([]byte, k)...)
		if _, err := io.ReadFull(r.br, r.buf[at:]); err != nil {
			return 0, nil, err
		}
	}
	p := r.buf[:n]
	if cap(r.buf) > 4<<20 && n < 64<<10 {
		r.buf = nil // do not pin a big snapshot frame's buffer
	}
	return tag, p, nil
}
