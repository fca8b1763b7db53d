package client

import (
	"encoding/binary"
	"errors"
)

// Stored values carry a header so that a fill can be compared with what the
// cache holds:
//
//	magic  [2]byte  0xC5 0x01 (format 1)
//	flags  byte     flagNegative | flagTombstone
//	version int64   origin version, big endian
//	soft   int64    soft expiry, unix milliseconds, big endian
//	payload
//
// The hard expiry is the key's TTL on the server.
const (
	magic0     = 0xC5
	magic1     = 0x01
	headerSize = 2 + 1 + 8 + 8

	flagNegative  = 1 << 0 // the origin has no such key
	flagTombstone = 1 << 1 // left by Invalidate: no value, only the writer's version
)

var errBadEntry = errors.New("cachenode/client: value without a client header")

// entry is a decoded stored value. payload aliases the buffer it was
// decoded from.
type entry struct {
	flags   byte
	version int64
	soft    int64
	payload []byte
}

func (e entry) negative() bool  { return e.flags&flagNegative != 0 }
func (e entry) tombstone() bool { return e.flags&flagTombstone != 0 }

func encode(e entry) []byte {
	b := make([]byte, headerSize+len(e.payload))
	b[0], b[1], b[2] = magic0, magic1, e.flags
	binary.BigEndian.PutUint64(b[3:], uint64(e.version))
	binary.BigEndian.PutUint64(b[11:], uint64(e.soft))
	copy(b[headerSize:], e.payload)
	return b
}

func decode(b []byte) (entry, error) {
	if len(b) < headerSize || b[0] != magic0 || b[1] != magic1 {
		return entry{}, errBadEntry
	}
	return entry{
		flags:   b[2],
		version: int64(binary.BigEndian.Uint64(b[3:])),
		soft:    int64(binary.BigEndian.Uint64(b[11:])),
		payload: b[headerSize:],
	}, nil
}
