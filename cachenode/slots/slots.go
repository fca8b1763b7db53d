// Package slots is Redis Cluster's key → hash slot function: CRC16/XMODEM
// (polynomial 0x1021, initial 0) of the key, or of its hash tag, modulo
// 16384. The hash tag is the text between the first '{' and the first '}'
// after it, when that text is not empty ("{user}.a" and "{user}.b" share a
// slot; "{}x" and "a{b" hash whole).
package slots

// N is the number of Redis Cluster hash slots.
const N = 16384

// Of returns the hash slot of key.
func Of(key []byte) int {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j > i+1 {
						key = key[i+1 : j]
					}
					return int(CRC16(key)) & (N - 1)
				}
			}
			break
		}
	}
	return int(CRC16(key)) & (N - 1)
}

var crcTable = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

// CRC16 is CRC-16/XMODEM, the checksum Redis Cluster hashes keys with.
func CRC16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^c]
	}
	return crc
}
