package dump

import (
	"encoding/binary"
	"hash/crc64"
)

// checksum is hash/crc64's Checksum(p, MakeTable(ECMA)), slicing by 8
// bytes at every length. The standard library compares its 2 KB table
// with the ECMA one on every call before it slices, which costs more than
// the checksum itself for the 100-byte values most records carry.
func checksum(p []byte) uint64 {
	t := crcTables
	crc := ^uint64(0)
	for len(p) > 8 {
		crc ^= binary.LittleEndian.Uint64(p)
		crc = t[7][crc&0xff] ^ t[6][(crc>>8)&0xff] ^ t[5][(crc>>16)&0xff] ^ t[4][(crc>>24)&0xff] ^
			t[3][(crc>>32)&0xff] ^ t[2][(crc>>40)&0xff] ^ t[1][(crc>>48)&0xff] ^ t[0][crc>>56]
		p = p[8:]
	}
	for _, v := range p {
		crc = t[0][byte(crc)^v] ^ (crc >> 8)
	}
	return ^crc
}

// crcTables are the slicing-by-8 tables of the ECMA polynomial, built as
// hash/crc64 builds its own.
var crcTables = func() *[8][256]uint64 {
	var t [8][256]uint64
	t[0] = *crc64.MakeTable(crc64.ECMA)
	for i := range 256 {
		crc := t[0][i]
		for j := 1; j < 8; j++ {
			crc = t[0][crc&0xff] ^ (crc >> 8)
			t[j][i] = crc
		}
	}
	return &t
}()
